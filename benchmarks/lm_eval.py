"""`python -m benchmarks.lm_eval`: lm-eval wall time with `--model jetgym` against `--model hf`, same model folder.

Workloads (offline tasks, see `jetgym.integrations.lm_eval_tasks`): MMLU-285 with the answer texts as choices
(`jetgym_mmlu285_cloze`) and with lm-eval's lettered prompt (`jetgym_mmlu285`), a few-shot one (the cloze task
with `--num_fewshot`, long contexts shared by the four choices and across documents), and a perplexity one
(`loglikelihood_rolling` over each subject's 5 questions and answers as one document). Methods: the jetgym model
and lm-eval's HF backend at one batch size, each in float32 and bfloat16.

Protocol: one process; per workload, every method runs `simple_evaluate` once untimed on 2 documents, then
`rounds` timed runs, interleaved in an order that rotates each round; the report gives the median, the
interquartile range and the first pass; nothing is re-timed. Agreement (float32 and bfloat16, each against the HF
backend in the same dtype): per-request max |delta log-likelihood|, identical is_greedy, and the task metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from benchmarks.doc import rotated, spread, write_results

DTYPES = ("float32", "bfloat16")


def perplexity_task(folder: Path) -> str:
    """A local loglikelihood_rolling task: each MMLU-285 subject's questions and answers as one document."""
    from jetgym.integrations.lm_eval_tasks import mmlu_documents

    by_subject: dict[str, list[str]] = {}
    for d in mmlu_documents("per_subject_5"):
        by_subject.setdefault(d["subject"], []).append(f"{d['question'].strip()} {d['choices'][d['answer']].strip()}")
    data = folder / "jetgym_mmlu285_text.jsonl"
    data.write_text("".join(json.dumps({"text": "\n".join(texts)}) + "\n" for texts in by_subject.values()))
    (folder / "jetgym_mmlu285_text.yaml").write_text(
        json.dumps(
            {
                "task": "jetgym_mmlu285_text",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(data)}},
                "test_split": "test",
                "output_type": "loglikelihood_rolling",
                "doc_to_text": "",
                "doc_to_target": "{{text}}",
                "should_decontaminate": False,
            }
        )
    )
    return "jetgym_mmlu285_text"


def samples(results: dict, task: str) -> list[dict]:
    return sorted(results["samples"][task], key=lambda s: s["doc_id"])


def responses(results: dict, task: str) -> list:
    return [r for s in samples(results, task) for r in s["filtered_resps"]]


def request_tokens(results: dict, task: str, count: Callable[[str], int]) -> list[int]:
    """Tokens of each request (its context and continuation, or its rolling text), in `responses` order."""
    return [
        sum(count(text) for text in args if isinstance(text, str))
        for s in samples(results, task)
        for args in s["arguments"]
    ]


def agreement(reference: dict, ours: dict, task: str, count: Callable[[str], int] | None = None) -> dict:
    """Requests, the largest |delta|, identical is_greedy and metrics; with `count` (a token counter, float32),
    how many requests lie within 1e-4 + 1e-5 per token of the whole request (context and continuation: HF is
    another implementation, whose rounding grows with the context too; the scoring contract's tighter bound,
    per candidate token against the `independent` path, is held by the tests) and the largest |delta| / bound."""
    ref, mine = responses(reference, task), responses(ours, task)
    values = [(a[0], b[0]) if isinstance(a, (list, tuple)) else (a, b) for a, b in zip(ref, mine)]
    greedy = [a[1] == b[1] for a, b in zip(ref, mine) if isinstance(a, (list, tuple))]
    metrics = {
        k: (reference["results"][task][k], ours["results"][task][k])
        for k in reference["results"][task]
        if k.endswith(",none") and "stderr" not in k
    }
    deltas = [abs(float(a) - float(b)) for a, b in values]
    out = {
        "requests": len(ref),
        "max_abs_delta": max(deltas),
        "is_greedy_identical": f"{sum(greedy)}/{len(greedy)}" if greedy else "n/a",
        "metrics_identical": all(a == b for a, b in metrics.values()),
        "metrics": {k: {"hf": a, "jetgym": b} for k, (a, b) in metrics.items()},
    }
    if count is not None:
        bounds = [1e-4 + 1e-5 * n for n in request_tokens(reference, task, count)]
        out["within_fp32_bound"] = f"{sum(d <= b for d, b in zip(deltas, bounds))}/{len(deltas)}"
        out["largest_delta_over_bound"] = max(d / b for d, b in zip(deltas, bounds))
    return out


def run_bench(args) -> dict:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from jetgym.integrations.lm_eval import JetgymLM
    from jetgym.integrations.lm_eval_tasks import task_folder
    from jetgym.scorers.models import resolve

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = resolve(args.model)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    extra = Path(tempfile.mkdtemp(prefix="python -m benchmarks.lm_eval-"))
    text_task = perplexity_task(extra)
    manager = TaskManager(include_path=[str(task_folder()), str(extra)])
    methods = {}
    for dtype in args.dtypes:
        methods[f"jetgym_{dtype}"] = JetgymLM(model=args.model, dtype=dtype, max_batch_tokens=args.max_batch_tokens)
        methods[f"hf_bs{args.hf_batch_size}_{dtype}"] = HFLM(
            pretrained=folder, batch_size=args.hf_batch_size, dtype=dtype, device="cpu"
        )
    workloads = [
        ("mmlu285_cloze", "jetgym_mmlu285_cloze", None, None),
        ("mmlu285_letters", "jetgym_mmlu285", None, None),
        (f"mmlu_cloze_{args.fewshot}shot", "jetgym_mmlu285_cloze", args.fewshot, args.fewshot_limit),
        ("perplexity", text_task, None, None),
    ]
    if args.only:
        workloads = [w for w in workloads if w[0] in args.only]

    def evaluate(lm, task, shots, limit):
        return simple_evaluate(
            model=lm, tasks=[task], num_fewshot=shots, limit=limit, task_manager=manager, log_samples=True
        )

    out = {
        "command": " ".join(["python -m benchmarks.lm_eval", *sys.argv[1:]]),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "model": args.model,
        "rounds": args.rounds,
        "dtypes": list(args.dtypes),
        "hf_batch_size": args.hf_batch_size,
        "max_batch_tokens": args.max_batch_tokens,
        "workloads": {},
    }
    names = list(methods)
    for workload, task, shots, limit in workloads:
        for name in names:  # warm-up, untimed
            evaluate(methods[name], task, shots, 2)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        last: dict[str, dict] = {}
        for round_index in range(args.rounds):
            for name in rotated(names, round_index):
                start = time.perf_counter()
                last[name] = evaluate(methods[name], task, shots, limit)
                seconds[name].append(time.perf_counter() - start)
                print(f"{workload} round {round_index} {name}: {seconds[name][-1]:.1f} s", flush=True)
        result = {
            "task": task,
            "num_fewshot": shots,
            "limit": limit,
            "documents": len(last[names[0]]["samples"][task]),
            "seconds": {name: spread(v) for name, v in seconds.items()},
            "agreement": {},
        }
        for dtype in args.dtypes:
            hf, jet = f"hf_bs{args.hf_batch_size}_{dtype}", f"jetgym_{dtype}"
            result["agreement"][dtype] = agreement(last[hf], last[jet], task, count if dtype == "float32" else None)
            result["seconds"][f"speedup_{dtype}"] = {
                "median": result["seconds"][hf]["median"] / result["seconds"][jet]["median"],
                "first": result["seconds"][hf]["first"] / result["seconds"][jet]["first"],
            }
        out["workloads"][workload] = result
    return out


def render(r: dict) -> str:
    lines = [
        "## lm-eval: `--model jetgym` against `--model hf` (embedded model, same folder)",
        "",
        f"Command: `{r['command']}` — {r['cpus']} cores ({r['threads']} torch threads), CPU, model "
        f"`{r['model']}`; HF backend at batch size {r['hf_batch_size']} (the best of 8 and 16 in the fp32 "
        f"`jet-execution` section, not searched again here); jetgym `max_batch_tokens={r['max_batch_tokens']}`.",
        "",
        f"Protocol: one process; per workload every method runs `lm_eval.simple_evaluate` (tasks, metrics, "
        f"`log_samples` included) once untimed on 2 documents, then {r['rounds']} timed runs interleaved in an "
        "order that rotates each round. Median [interquartile range] and first pass, seconds. Agreement: "
        "against the HF backend in the same dtype, every request (fp32: 1e-4 + 1e-5 per token of the request); in "
        "bfloat16 the HF backend also takes log_softmax in bfloat16 (its `softmax_dtype` unset), jetgym in "
        "float32 from the bfloat16 logits, so bf16 values differ by more than the model's rounding.",
        "",
    ]
    for name, w in r["workloads"].items():
        shots = f", {w['num_fewshot']}-shot" if w["num_fewshot"] else ""
        limit = f", first {w['limit']} documents" if w["limit"] else ""
        lines += [
            f"**{name}** (`{w['task']}`{shots}{limit}; {w['documents']} documents)",
            "",
            "| method | median s [IQR] | first pass s |",
            "|---|---:|---:|",
        ]
        for method, s in w["seconds"].items():
            if not method.startswith("speedup"):
                lines.append(f"| {method} | {s['median']:.1f} [{s['q1']:.1f}, {s['q3']:.1f}] | {s['first']:.1f} |")
        lines.append("")
        for dtype in r["dtypes"]:
            s, a = w["seconds"][f"speedup_{dtype}"], w["agreement"][dtype]
            metrics = ", ".join(f"{k.split(',')[0]} {v['hf']:.4f}/{v['jetgym']:.4f}" for k, v in a["metrics"].items())
            lines.append(
                f"- {dtype}: hf / jetgym = **{s['median']:.2f}x** (first pass {s['first']:.2f}x); "
                f"{a['requests']} requests, max |delta loglikelihood| {a['max_abs_delta']:.2e}"
                + (
                    f" (within 1e-4 + 1e-5 per request token: {a['within_fp32_bound']}, largest |delta| / bound "
                    f"{a['largest_delta_over_bound']:.2f})"
                    if "within_fp32_bound" in a
                    else ""
                )
                + ", is_greedy "
                f"identical {a['is_greedy_identical']}, metrics identical: {a['metrics_identical']} "
                f"(hf/jetgym: {metrics})"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lm_eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hf-batch-size", type=int, default=8)
    parser.add_argument("--max-batch-tokens", type=int, default=1024)
    parser.add_argument("--fewshot", type=int, default=5)
    parser.add_argument("--fewshot-limit", type=int, default=57, help="documents of the few-shot workload")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=DTYPES,
        default=list(DTYPES),
        help="bfloat16 only where the CPU computes it natively (AVX-512 BF16 / AMX): elsewhere torch "
        "emulates it, tens of times slower than float32",
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these workloads")
    parser.add_argument("--output-dir", default="outputs/bench-lm-eval")
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks.md (section lm-eval)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    results = run_bench(args)
    print(write_results(args.output_dir, "lm_eval", results, render(results), docs=args.docs))


if __name__ == "__main__":
    main()
