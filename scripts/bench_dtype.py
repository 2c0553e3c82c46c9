"""`jetgym-bench-dtype`: speed and agreement of the fast CPU dtypes against the fp32 reference on MMLU-285.

In ONE process, the same `jet` scorer settings run each question chunk (the QA job's chunk of 16) under every
method, the method order rotating per chunk (interleaved, equal rounds, a warm-up chunk untimed):
  float32     the reference;
  bfloat16    weights and activations in bf16 (AMX / AVX512-BF16 where the CPU has them);
  int8        `torch.ao.quantization.quantize_dynamic` of the linear layers (fp32 activations, int8 weights).
Reported per method: whole-set seconds (sum over chunks), seconds per question (median over chunks with the
interquartile range), identical choices and max |delta prob| against float32, and the achieved model FLOP/s next to
the peak of a large matmul in the same dtype, measured in the same run (distance to the hardware limit).
Writes `dtype.json` / `dtype.md` into the run folder; `docs=true` also writes the `dtype` section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional

import hydra
from hydra.core.config_store import ConfigStore
from tqdm import tqdm

from jetgym.scripts.benchmarks_doc import run_config, write_results
from jetgym.scripts.config import CONFIG_PATH


@dataclass
class BenchDtypeConfig:
    model: str = "smollm2-135m-instruct"
    subset: str = "per_subject_5"
    limit: Optional[int] = None
    chunk_size: int = 16
    template: str = "none"
    methods: List[str] = field(default_factory=lambda: ["float32", "bfloat16", "int8"])  # int8: dynamic, linear layers
    docs: bool = False
    output_dir: Optional[str] = None


ConfigStore.instance().store(name="bench_dtype_schema", node=BenchDtypeConfig)


def build_methods(cfg: BenchDtypeConfig) -> dict:
    import torch

    from jetgym.scorers import make_scorer
    from jetgym.scorers.models import load_model

    methods = {}
    for name in cfg.methods:
        if name == "int8":
            loaded = load_model(cfg.model, {"device": "cpu", "dtype": "float32"})
            loaded.model = torch.ao.quantization.quantize_dynamic(loaded.model, {torch.nn.Linear}, dtype=torch.qint8)
        else:
            loaded = load_model(cfg.model, {"device": "cpu", "dtype": name})
        methods[name] = make_scorer("jet", model=loaded, template=cfg.template, reuse_prefix=False)  # chunks are re-timed
    return methods


def run_bench(cfg: BenchDtypeConfig) -> dict:
    import torch

    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers.placement import cpu_has_native_bf16
    from jetgym.scripts.flops import ModelFlops, matmul_peak

    questions = load_mmlu(subset=cfg.subset, limit=cfg.limit)
    chunks = [questions[i : i + cfg.chunk_size] for i in range(0, len(questions), cfg.chunk_size)]
    methods = build_methods(cfg)
    names = list(methods)
    for name in names:  # warm-up, untimed
        methods[name].decide_many(chunks[0][:2])
    seconds = {n: [] for n in names}
    decisions = {n: [] for n in names}
    tokens = {n: [0, 0] for n in names}  # prefix, candidate tokens fed
    for index, chunk in enumerate(tqdm(chunks, desc="chunks")):
        order = names[index % len(names):] + names[: index % len(names)]
        for name in order:
            start = time.perf_counter()
            made = methods[name].decide_many(chunk)
            seconds[name].append(time.perf_counter() - start)
            decisions[name].extend(made)
            tokens[name][0] += sum(d.usage.prefix_tokens for d in made)
            tokens[name][1] += sum(d.usage.candidate_tokens for d in made)
    reference = decisions["float32"]
    flops = ModelFlops.of(methods["float32"].loaded.model)  # int8 weights are not parameters: count the fp32 model
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.float32}
    rows = {}
    for name in names:
        per_question = sorted(s / len(c) for s, c in zip(seconds[name], chunks))
        q1, median, q3 = statistics.quantiles(per_question, n=4) if len(per_question) > 1 else [per_question[0]] * 3
        total = sum(seconds[name])
        rows[name] = {
            "whole_set_seconds": total, "first_chunk_seconds": seconds[name][0],
            "seconds_per_question": {"median": median, "q1": q1, "q3": q3},
            "same_choice": sum(a.choice == b.choice for a, b in zip(decisions[name], reference)),
            "max_abs_delta_prob": max(max(abs(x - y) for x, y in zip(a.probs, b.probs)) for a, b in zip(decisions[name], reference)),
            "max_abs_delta_logprob": max(max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) for a, b in zip(decisions[name], reference)),
            "correct": sum(bool(d.correct) for d in decisions[name]),
            "model_flops_per_second": flops(*tokens[name]) / total,
            "matmul_peak_flops_per_second": matmul_peak(dtypes[name]),
        }
    return {
        "command": "jetgym-bench-dtype " + " ".join(sys.argv[1:]), "questions": len(questions), "chunks": len(chunks),
        "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
        "native_bf16": cpu_has_native_bf16(), "template": cfg.template, "methods": rows,
    }


def render(r: dict) -> str:
    lines = [
        "## CPU dtypes: speed and agreement with fp32 (MMLU-285, `jet`)", "",
        f"Command: `{r['command']}` — {r['machine']} CPU with native bf16 = {r['native_bf16']}, {r['cores']} cores, "
        f"{r['torch_threads']} torch threads, embedded SmolLM2-135M-Instruct, template {r['template']}. {r['questions']} "
        f"questions in {r['chunks']} chunks; every chunk runs under every method in rotating order (one process, equal "
        "rounds, one untimed warm-up). Seconds per question: median over chunks [interquartile range].", "",
        "| method | whole set s | s / question | first chunk s | same choice as fp32 | max abs dprob | max abs dlogprob | accuracy | model GFLOP/s | matmul peak GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in r["methods"].items():
        s = m["seconds_per_question"]
        lines.append(
            f"| {name} | {m['whole_set_seconds']:.1f} | {s['median']:.3f} [{s['q1']:.3f}, {s['q3']:.3f}] | "
            f"{m['first_chunk_seconds']:.2f} | {m['same_choice']}/{r['questions']} | {m['max_abs_delta_prob']:.4f} | "
            f"{m['max_abs_delta_logprob']:.3f} | {m['correct']}/{r['questions']} | {m['model_flops_per_second'] / 1e9:.1f} | "
            f"{m['matmul_peak_flops_per_second'] / 1e9:.0f} |")
    return "\n".join(lines)


@hydra.main(config_path=CONFIG_PATH, config_name="bench_dtype", version_base=None)
def main(cfg) -> None:
    config = run_config(cfg)
    results = run_bench(config)
    write_results(config.output_dir, "dtype", results, render(results), docs=config.docs)
    print(render(results))


if __name__ == "__main__":
    main()
