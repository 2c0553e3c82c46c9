"""`python -m benchmarks.scoring`: JET execution cost on the MMLU subset against floors, the reference and lm-eval.

Protocol (docs/design.md, "Benchmark protocol"): every method runs in one process, `rounds` times per question, interleaved in an order
that rotates every round (each method leads in turn), after an untimed warm-up on the first questions:
  info floor     one forward over the prefix alone (the least any scorer must compute);
  compute floor  one plain causal forward over exactly the tokens the packed call feeds
                 (prefix + every candidate token but the last), keeping as many logit rows;
  schedules      `scorer.decide` with each JET schedule (tokenization included);
  independent    one full forward per candidate (the reference);
  lm-eval        HFLM.loglikelihood on the same (context, continuation) requests, batch 1 and 4.
Reported per method: the median over questions of the per-question median seconds with the interquartile
range over questions, and the first pass (the median over questions of the first round's seconds).
Whole set: `decide_many` with cross-question packing vs lm-eval over all requests at several batch sizes, each
`whole_set_rounds` times, interleaved the same way: median, interquartile range, first pass.
Distance to the hardware limit: achieved model FLOP/s of every method (model FLOPs of the tokens it feeds,
`benchmarks.flops`) next to the peak of a large matmul in the model's dtype, measured in the same run.
`dtype` (float32 | bfloat16 | auto) loads jet's model and lm-eval's in the same dtype. Writes
docs/benchmarks.md (section jet-execution, or jet-execution-<dtype> for another dtype) and docs/bench/.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from tqdm import tqdm

from jetgym.scorers.decision import first_argmax

from jetgym.scorers.placement import Placement
from benchmarks.doc import rotated, run_config, spread, write_results
from jetgym.scripts.config import CONFIG_PATH

SCHEDULES = ("batched", "packed")


@dataclass
class BenchConfig:
    model: str = "smollm2-135m-instruct"
    subset: str = "per_subject_5"
    limit: int | None = None
    rounds: int = 3  # per question, every method, interleaved in a rotating order
    whole_set_rounds: int = 3  # whole set, every method, interleaved in a rotating order
    warmup_questions: int = 3  # untimed, every method
    per_question_lm_eval_batch_sizes: list[int] = field(default_factory=lambda: [1, 4])
    whole_set_lm_eval_batch_sizes: list[int] = field(default_factory=lambda: [1, 4, 16])
    max_batch_tokens: int = 1024
    dtype: str = "float32"  # the CPU dtype of jet and lm-eval alike (float32 | bfloat16 | auto)
    docs: bool = False  # also write docs/benchmarks.md and docs/bench/ (source checkout only)
    output_dir: Optional[str] = None  # the run folder (null: Hydra's run dir)

    def __post_init__(self):
        for name in ("rounds", "whole_set_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_questions < 0:
            raise ValueError(f"warmup_questions must be >= 0, got {self.warmup_questions}")
        Placement(device="cpu", dtype=self.dtype)  # names the field and its choices when the dtype is unknown


ConfigStore.instance().store(name="bench_schema", node=BenchConfig)


def _requests(question):
    from lm_eval.api.instance import Instance

    return [
        Instance(request_type="loglikelihood", doc={}, arguments=(question.context, c), idx=i)
        for i, c in enumerate(question.candidates)
    ]


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def per_question_summary(times: list[list[float]]) -> dict:
    """Per-question timings (one list of rounds per question) -> the median over questions of each question's
    median, its interquartile range over questions, and the first pass (median over questions of round 1)."""
    medians = spread([statistics.median(t) for t in times])
    return {
        "median": medians["median"],
        "q1": medians["q1"],
        "q3": medians["q3"],
        "first_pass": statistics.median(t[0] for t in times),
        "total_median": sum(statistics.median(t) for t in times),
    }


def run_bench(cfg: BenchConfig) -> dict:
    """Measure everything side by side; returns (and writes) the results."""
    import torch
    from lm_eval.models.huggingface import HFLM

    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers import make_scorer
    from jetgym.scorers.execution import fed_tokens
    from jetgym.scorers.models import load_model, resolve
    from jetgym.scorers.prompts import encode
    from benchmarks.flops import ModelFlops, dtype_name, matmul_peak, model_dtype

    questions = load_mmlu(subset=cfg.subset, limit=cfg.limit)
    loaded = load_model(cfg.model, {"device": "cpu", "dtype": cfg.dtype})
    model = loaded.model
    dtype = model_dtype(model)
    jets = {
        s: make_scorer(
            "jet", model=loaded, template="none", schedule=s, max_batch_tokens=cfg.max_batch_tokens, reuse_prefix=False
        )  # every timing computes its whole prefix (questions are re-timed)
        for s in ("independent", *SCHEDULES)
    }
    lm_evals = {
        bs: HFLM(pretrained=resolve(cfg.model), batch_size=bs, device="cpu", dtype=dtype_name(dtype))
        for bs in sorted(set(cfg.per_question_lm_eval_batch_sizes) | set(cfg.whole_set_lm_eval_batch_sizes))
    }

    def info_floor(encoded):
        with torch.inference_mode():
            model(input_ids=torch.tensor([encoded.prefix]), logits_to_keep=1)
        return None, (len(encoded.prefix), 0)

    def compute_floor(encoded):
        tokens = list(encoded.prefix) + [t for c in encoded.continuations for t in c[:-1]]
        with torch.inference_mode():
            model(input_ids=torch.tensor([tokens]), logits_to_keep=1 + fed_tokens(encoded))
        return None, (len(encoded.prefix), fed_tokens(encoded))

    def jet(schedule, question):
        decision = jets[schedule].decide(question)
        return decision.logprobs, (decision.usage.prefix_tokens, decision.usage.candidate_tokens)

    def lm_eval(bs, question, encoded):  # every request runs its context again: tokens counted as fed
        values = [ll for ll, _ in lm_evals[bs].loglikelihood(_requests(question), disable_tqdm=True)]
        return values, (len(encoded.prefix) * len(encoded.continuations), sum(len(c) for c in encoded.continuations))

    methods = {
        "info_floor": lambda q, e: info_floor(e),
        "compute_floor": lambda q, e: compute_floor(e),
        **{s: (lambda s: lambda q, e: jet(s, q))(s) for s in ("independent", *SCHEDULES)},
        **{
            f"lm_eval_bs{bs}": (lambda bs: lambda q, e: lm_eval(bs, q, e))(bs)
            for bs in cfg.per_question_lm_eval_batch_sizes
        },
    }
    names = list(methods)
    times = {n: [] for n in names}
    scores = {n: [] for n in names if not n.endswith("floor")}
    tokens = {n: [0, 0] for n in names}
    encodings = [
        encode(loaded.tokenizer, q.context, list(dict.fromkeys(q.candidates)), "none", loaded.window) for q in questions
    ]
    for q, e in zip(questions[: cfg.warmup_questions], encodings[: cfg.warmup_questions]):  # warm-up, untimed
        for n in names:
            methods[n](q, e)
    for i, (q, e) in enumerate(tqdm(list(zip(questions, encodings)), desc="per question")):
        rounds = {n: [] for n in names}
        for r in range(cfg.rounds):
            for n in rotated(names, i * cfg.rounds + r):
                seconds, (values, fed) = _timed(lambda: methods[n](q, e))
                rounds[n].append(seconds)
                if r == 0:
                    tokens[n][0] += fed[0]
                    tokens[n][1] += fed[1]
                    if n in scores:
                        scores[n].append(list(values))
        for n in names:
            times[n].append(rounds[n])

    all_requests = [r for q in questions for r in _requests(q)]
    whole_methods = {
        "jet_packed_cross_question": lambda: jets["packed"].decide_many(questions),
        **{
            f"lm_eval_bs{bs}": (lambda bs: lambda: lm_evals[bs].loglikelihood(all_requests, disable_tqdm=True))(bs)
            for bs in cfg.whole_set_lm_eval_batch_sizes
        },
    }
    whole_times = {n: [] for n in whole_methods}
    whole_tokens = {}
    for r in tqdm(range(cfg.whole_set_rounds), desc="whole set"):
        for n in rotated(list(whole_methods), r):
            seconds, value = _timed(whole_methods[n])
            whole_times[n].append(seconds)
            if n == "jet_packed_cross_question":
                whole_tokens[n] = (
                    sum(d.usage.prefix_tokens for d in value),
                    sum(d.usage.candidate_tokens for d in value),
                )
    lm_tokens = (
        sum(len(e.prefix) * len(e.continuations) for e in encodings),
        sum(len(c) for e in encodings for c in e.continuations),
    )
    whole_tokens.update({n: lm_tokens for n in whole_methods if n.startswith("lm_eval")})

    reference = scores["independent"]
    agreement = {}
    for n, values in scores.items():
        deltas = [abs(a - b) for v, r in zip(values, reference) for a, b in zip(v, r)]
        same = sum(first_argmax(v) == first_argmax(r) for v, r in zip(values, reference))
        agreement[n] = {"identical_choices_vs_independent": same, "max_abs_delta_logprob_vs_independent": max(deltas)}
    flops = ModelFlops.of(model)
    per_question = {n: per_question_summary(t) for n, t in times.items()}
    for n, summary in per_question.items():
        summary["model_flops"] = flops(*tokens[n])
        summary["model_flops_per_second"] = summary["model_flops"] / summary["total_median"]
    whole = {}
    for n, t in whole_times.items():
        whole[n] = spread(t)
        whole[n]["model_flops_per_second"] = flops(*whole_tokens[n]) / whole[n]["median"]
    results = {
        "command": "python -m benchmarks.scoring " + " ".join(sys.argv[1:]),
        "dtype": dtype_name(dtype),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "rounds": cfg.rounds,
        "whole_set_rounds": cfg.whole_set_rounds,
        "warmup_questions": cfg.warmup_questions,
        "questions": len(questions),
        "requests": len(all_requests),
        "mean_prefix_tokens": statistics.mean(len(e.prefix) for e in encodings),
        "mean_candidate_tokens": statistics.mean(sum(len(c) for c in e.continuations) for e in encodings),
        "model_flops_per_token": flops.per_token(),
        "matmul_peak_flops_per_second": matmul_peak(dtype),
        "per_question": per_question,
        "per_question_seconds": times,
        "whole_set": whole,
        "agreement": agreement,
    }
    # fp32 keeps the section it always had; every other dtype writes its own beside it
    name = "jet_execution" if results["dtype"] == "float32" else f"jet_execution_{results['dtype']}"
    write_results(cfg.output_dir, name, results, render(results), docs=cfg.docs)
    return results


def render(r: dict) -> str:
    pq, w = r["per_question"], r["whole_set"]
    m = {n: s["median"] for n, s in pq.items()}
    best = min(SCHEDULES, key=lambda s: m[s])
    lm_best_name = min((k for k in w if k.startswith("lm_eval")), key=lambda k: w[k]["median"])
    peak = r["matmul_peak_flops_per_second"]
    lines = [
        f"## JET execution on MMLU (embedded model, template none, {r['dtype']})",
        "",
        f"Command: `{r['command']}` — {r['questions']} questions, {r['requests']} requests, "
        f"{r['cores']} cores ({r['torch_threads']} torch threads), {r['dtype']} CPU. Mean prefix {r['mean_prefix_tokens']:.1f} tokens, "
        f"mean {r['mean_candidate_tokens']:.1f} candidate tokens per question.",
        "",
        f"Protocol: one process; every method runs every question {r['rounds']} times, interleaved in an order that "
        f"rotates each round, after {r['warmup_questions']} untimed warm-up questions. Per method: the median over "
        "questions of each question's median ms, [interquartile range over questions], and the first pass (median "
        "over questions of the first round). Whole set: every method "
        f"{r['whole_set_rounds']} times, interleaved the same way. Nothing is re-timed.",
        "",
        f"Distance to the hardware limit: peak of a 2048 x 2048 {r['dtype']} matmul in this run **{peak / 1e9:.0f} GFLOP/s**. "
        f"Model GFLOP/s = model FLOPs of the tokens a method feeds ({r['model_flops_per_token'] / 1e6:.0f} MFLOP per "
        "token with its logits row; prefix tokens without; lm-eval's repeated contexts counted) / its seconds.",
        "",
        "| per question | median ms [IQR] | first pass ms | vs compute floor | vs info floor | model GFLOP/s | % of matmul peak |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, s in pq.items():
        lines.append(
            f"| {n} | {s['median'] * 1000:.1f} [{s['q1'] * 1000:.1f}, {s['q3'] * 1000:.1f}] | {s['first_pass'] * 1000:.1f} | "
            f"{s['median'] / m['compute_floor']:.2f}x | {s['median'] / m['info_floor']:.2f}x | "
            f"{s['model_flops_per_second'] / 1e9:.1f} | {100 * s['model_flops_per_second'] / peak:.0f}% |"
        )
    lines += [
        "",
        f"Best schedule: **{best}** ({m[best] / m['compute_floor']:.2f}x the compute floor). "
        f"independent/{best} = {m['independent'] / m[best]:.2f}x; "
        + "; ".join(f"{n}/{best} = {m[n] / m[best]:.2f}x" for n in m if n.startswith("lm_eval"))
        + ".",
        "",
        "| whole set | median s [IQR] | first pass s | model GFLOP/s | % of matmul peak |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {n} | {s['median']:.1f} [{s['q1']:.1f}, {s['q3']:.1f}] | {s['first']:.1f} | {s['model_flops_per_second'] / 1e9:.1f} | "
            f"{100 * s['model_flops_per_second'] / peak:.0f}% |"
            for n, s in w.items()
        ],
        "",
        f"Whole set: {lm_best_name} (lm-eval's best batch size) / jet packed cross-question = "
        f"**{w[lm_best_name]['median'] / w['jet_packed_cross_question']['median']:.2f}x** (medians; first pass "
        f"{w[lm_best_name]['first'] / w['jet_packed_cross_question']['first']:.2f}x).",
        "",
        "| agreement with `independent` | identical choices | max abs delta logprob |",
        "|---|---:|---:|",
        *[
            f"| {n} | {a['identical_choices_vs_independent']}/{r['questions']} | {a['max_abs_delta_logprob_vs_independent']:.2e} |"
            for n, a in r["agreement"].items()
        ],
        "",
        "The `auto` schedule picks `packed` for attention-only models. Whole-set `decide_many` runs questions as "
        "left-padded rows of shared calls (up to `max_batch_tokens` tokens each), so the fixed per-call cost is shared.",
    ]
    return "\n".join(lines)


@hydra.main(config_path=CONFIG_PATH, config_name="bench", version_base=None)
def main(cfg) -> None:
    config = run_config(cfg)
    results = run_bench(config)
    print(render(results))


if __name__ == "__main__":
    main()
