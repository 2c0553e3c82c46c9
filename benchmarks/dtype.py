"""`python -m benchmarks.dtype`: speed and agreement of the fast CPU dtypes against the fp32 reference.

Question sets (`questions=`): `mmlu` (MMLU-285, the default), `libero` (the shipped LIBERO frames, describe
text) and `doom` (the questions a `jetgym-episode` run recorded in its steps.jsonl, `steps=PATH`, scored
against the nine controls: the control loop's own questions in the order they were asked).

In ONE process, the same `jet` scorer settings run each question chunk (the QA job's chunk of 16) under every
method, the method order rotating per chunk (interleaved, equal rounds, a warm-up chunk untimed):
  float32     the reference;
  bfloat16    weights and activations in bf16 (AMX / AVX512-BF16 where the CPU has them);
  int8        `torch.ao.quantization.quantize_dynamic` of the linear layers (fp32 activations, int8 weights).
A method may add trials after `+`: `compile` (`torch.compile(model.forward, dynamic=True)`, compiled in the
warm-up), `threads:N` (torch threads during its calls) and `batch:N` (max_batch_tokens, larger cross-question
calls) and `reuse` (`reuse_prefix`: the kept prefix of the previous chunk is read, as in a control loop; every
chunk still runs once per method), e.g. `methods=[float32,bfloat16,bfloat16+batch:4096,bfloat16+threads:1]`.
Reported per method: whole-set seconds (sum over chunks), seconds per question (median over chunks with the
interquartile range), identical choices and max |delta prob| against float32, and the achieved model FLOP/s next to
the peak of a large matmul in the same dtype, measured in the same run (distance to the hardware limit).
Writes `dtype.json` / `dtype.md` into the run folder (`dtype_<set>` for libero and doom); `docs=true` also
writes the matching section of docs/benchmarks.md (`dtype`, `dtype-libero`, `dtype-doom`).

    python -m benchmarks.dtype questions=doom steps=runs/doom/steps.jsonl limit=300 chunk_size=1 \
        methods=[float32,float32+reuse,bfloat16,bfloat16+reuse]
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

from benchmarks.doc import run_config, write_results
from jetgym.scripts.config import CONFIG_PATH


@dataclass
class BenchDtypeConfig:
    model: str = "smollm2-135m-instruct"
    subset: str = "per_subject_5"
    limit: Optional[int] = None
    chunk_size: int = 16
    questions: str = "mmlu"  # mmlu | libero | doom
    template: Optional[str] = None  # null: none for mmlu (the MMLU benchmarks' setting), chat for libero and doom
    steps: Optional[str] = None  # questions=doom: a steps.jsonl written by jetgym-episode
    methods: List[str] = field(default_factory=lambda: ["float32", "bfloat16", "int8"])  # int8: dynamic, linear layers
    max_batch_tokens: int = 1024  # of every method without `+batch:N`
    docs: bool = False
    output_dir: Optional[str] = None

    def __post_init__(self):
        if self.questions not in QUESTION_SETS:
            raise ValueError(f"questions must be one of {', '.join(QUESTION_SETS)}, got {self.questions!r}")
        if self.questions == "doom" and not self.steps:
            raise ValueError(
                "questions=doom needs steps=PATH: the steps.jsonl of a jetgym-episode run "
                "(e.g. jetgym-episode env=defend_the_center video=false output_dir=runs/doom)"
            )
        if self.template is None:
            self.template = "none" if self.questions == "mmlu" else "chat"
        for name in self.methods:
            MethodSpec.parse(name)  # names the bad method and the fix
        if "float32" not in self.methods:
            raise ValueError(f"methods must include float32 (the reference), got {list(self.methods)}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods lists a method twice: {list(self.methods)}")


ConfigStore.instance().store(name="bench_dtype_schema", node=BenchDtypeConfig)

DTYPES = ("float32", "bfloat16", "int8")
QUESTION_SETS = ("mmlu", "libero", "doom")


@dataclass(frozen=True)
class MethodSpec:
    """One method of the benchmark: a dtype and the trials added after `+`."""

    dtype: str
    compile: bool = False
    threads: Optional[int] = None
    batch: Optional[int] = None
    reuse: bool = False

    @classmethod
    def parse(cls, name: str) -> "MethodSpec":
        dtype, *trials = str(name).split("+")
        if dtype not in DTYPES:
            raise ValueError(f"methods: {name!r} must start with one of {', '.join(DTYPES)}")
        fields = {}
        for trial in trials:
            key, _, value = trial.partition(":")
            if key in ("compile", "reuse") and not value:
                fields[key] = True
            elif key in ("threads", "batch") and value.isdigit() and int(value) > 0:
                fields[key] = int(value)
            else:
                raise ValueError(
                    f"methods: unknown trial {trial!r} in {name!r}; use compile, reuse, threads:N or "
                    "batch:N (N a positive integer)"
                )
        return cls(dtype, **fields)


def build_methods(cfg: BenchDtypeConfig) -> dict:
    """{method name: (run, scorer)}: `run(chunk)` is the scorer's `decide_many` under the method's trials."""
    import torch

    from jetgym.scorers import make_scorer
    from jetgym.scorers.models import load_model

    methods = {}
    for name in cfg.methods:
        spec = MethodSpec.parse(name)
        if spec.dtype == "int8":
            loaded = load_model(cfg.model, {"device": "cpu", "dtype": "float32"})
            loaded.model = torch.ao.quantization.quantize_dynamic(loaded.model, {torch.nn.Linear}, dtype=torch.qint8)
        else:
            loaded = load_model(cfg.model, {"device": "cpu", "dtype": spec.dtype})
        if spec.compile:
            loaded.model.forward = torch.compile(loaded.model.forward, dynamic=True)
        scorer = make_scorer(
            "jet",
            model=loaded,
            template=cfg.template,
            reuse_prefix=spec.reuse,
            max_batch_tokens=spec.batch or cfg.max_batch_tokens,
        )
        methods[name] = with_threads(scorer.decide_many, spec.threads), scorer
    return methods


def with_threads(fn, threads: Optional[int]):
    """`fn` run with `threads` torch threads (None: as set), the setting restored afterwards."""
    import torch

    if threads is None:
        return fn

    def run(*args):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn(*args)
        finally:
            torch.set_num_threads(before)

    return run


def recorded_questions(steps: str, limit: int | None = None) -> list:
    """The questions a jetgym-episode run asked (its steps.jsonl rows with a recorded question), in order, each
    against the nine controls."""
    from pathlib import Path

    from jetgym.envs.vizdoom.env import CONTROLS
    from jetgym.runs.folder import read_jsonl
    from jetgym.scorers.types import Question

    path = Path(steps)
    if not path.is_file():
        raise FileNotFoundError(f"steps={steps!r}: no such file; give the steps.jsonl of a jetgym-episode run")
    texts = [c.text for c in CONTROLS]
    questions = []
    for row in read_jsonl(path, what="step"):
        if row.get("question") is None:
            continue
        context = row["question"]  # one message, or the chat messages as a list
        questions.append(
            Question(
                context=context if isinstance(context, str) else tuple(context),
                candidates=texts,
                id=f"e{row['episode']}/s{row['step']}",
            )
        )
        if limit is not None and len(questions) == limit:
            break
    if not questions:
        raise ValueError(f"steps={steps!r} records no question: play the run with agent=scorer")
    return questions


def load_questions(cfg: BenchDtypeConfig) -> list:
    from jetgym.envs.libero.questions import load_libero
    from jetgym.questions.sets import load_mmlu

    if cfg.questions == "libero":
        return load_libero(limit=cfg.limit)
    if cfg.questions == "doom":
        return recorded_questions(cfg.steps, cfg.limit)
    return load_mmlu(subset=cfg.subset, limit=cfg.limit)


def run_bench(cfg: BenchDtypeConfig) -> dict:
    import torch

    from jetgym.scorers.placement import cpu_has_native_bf16
    from benchmarks.flops import ModelFlops, matmul_peak

    questions = load_questions(cfg)
    chunks = [questions[i : i + cfg.chunk_size] for i in range(0, len(questions), cfg.chunk_size)]
    methods = build_methods(cfg)
    names = list(methods)
    for run, scorer in methods.values():  # warm-up, untimed (a compiled method compiles here); nothing kept from it
        run(chunks[0][:2])
        if scorer.kept_prefix is not None:
            scorer.kept_prefix.clear()
    seconds = {n: [] for n in names}
    decisions = {n: [] for n in names}
    tokens = {n: [0, 0] for n in names}  # prefix, candidate tokens fed
    for index, chunk in enumerate(tqdm(chunks, desc="chunks")):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            start = time.perf_counter()
            made = methods[name][0](chunk)
            seconds[name].append(time.perf_counter() - start)
            decisions[name].extend(made)
            tokens[name][0] += sum(d.usage.prefix_tokens for d in made)
            tokens[name][1] += sum(d.usage.candidate_tokens for d in made)
    reference = decisions["float32"]
    flops = ModelFlops.of(methods["float32"][1].loaded.model)  # int8 weights are not parameters: count the fp32 model
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.float32}
    peaks = {dtype: matmul_peak(dtypes[dtype]) for dtype in {MethodSpec.parse(n).dtype for n in names}}
    rows = {}
    for name in names:
        per_question = sorted(s / len(c) for s, c in zip(seconds[name], chunks))
        q1, median, q3 = statistics.quantiles(per_question, n=4) if len(per_question) > 1 else [per_question[0]] * 3
        total = sum(seconds[name])
        rows[name] = {
            "whole_set_seconds": total,
            "first_chunk_seconds": seconds[name][0],
            "seconds_per_question": {"median": median, "q1": q1, "q3": q3},
            "same_choice": sum(a.choice == b.choice for a, b in zip(decisions[name], reference)),
            "max_abs_delta_prob": max(
                max(abs(x - y) for x, y in zip(a.probs, b.probs)) for a, b in zip(decisions[name], reference)
            ),
            "max_abs_delta_logprob": max(
                max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) for a, b in zip(decisions[name], reference)
            ),
            "correct": sum(bool(d.correct) for d in decisions[name]) if reference[0].correct is not None else None,
            "model_flops_per_second": flops(*tokens[name]) / total,
            "matmul_peak_flops_per_second": peaks[MethodSpec.parse(name).dtype],
        }
    return {
        "command": "python -m benchmarks.dtype " + " ".join(sys.argv[1:]),
        "questions": len(questions),
        "chunks": len(chunks),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "native_bf16": cpu_has_native_bf16(),
        "template": cfg.template,
        "max_batch_tokens": cfg.max_batch_tokens,
        "question_set": cfg.questions,
        "chunk_size": cfg.chunk_size,
        "methods": rows,
    }


def render(r: dict) -> str:
    title = {"mmlu": "MMLU", "libero": "LIBERO frames", "doom": "Doom control loop"}[r["question_set"]]
    lines = [
        f"## CPU dtypes: speed and agreement with fp32 ({title}, {r['questions']} questions, `jet`)",
        "",
        f"Command: `{r['command']}` — {r['machine']} CPU with native bf16 = {r['native_bf16']}, {r['cores']} cores, "
        f"{r['torch_threads']} torch threads, embedded SmolLM2-135M-Instruct, template {r['template']}, "
        f"max_batch_tokens {r['max_batch_tokens']} unless a method says `batch:N`. {r['questions']} questions in "
        f"{r['chunks']} chunks of {r['chunk_size']}; every chunk runs under every method in rotating order (one process, "
        "equal rounds, one untimed warm-up). Seconds per question: median over chunks [interquartile range].",
        "",
        "| method | whole set s | s / question | first chunk s | same choice as fp32 | max abs dprob | max abs dlogprob | accuracy | model GFLOP/s | matmul peak GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in r["methods"].items():
        s = m["seconds_per_question"]
        accuracy = "—" if m["correct"] is None else f"{m['correct']}/{r['questions']}"
        lines.append(
            f"| {name} | {m['whole_set_seconds']:.1f} | {s['median']:.3f} [{s['q1']:.3f}, {s['q3']:.3f}] | "
            f"{m['first_chunk_seconds']:.2f} | {m['same_choice']}/{r['questions']} | {m['max_abs_delta_prob']:.4f} | "
            f"{m['max_abs_delta_logprob']:.3f} | {accuracy} | {m['model_flops_per_second'] / 1e9:.1f} | "
            f"{m['matmul_peak_flops_per_second'] / 1e9:.0f} |"
        )
    return "\n".join(lines)


@hydra.main(config_path=CONFIG_PATH, config_name="bench_dtype", version_base=None)
def main(cfg) -> None:
    config = run_config(cfg)
    results = run_bench(config)
    name = "dtype" if config.questions == "mmlu" else f"dtype_{config.questions}"
    write_results(config.output_dir, name, results, render(results), docs=config.docs)
    print(render(results))


if __name__ == "__main__":
    main()
