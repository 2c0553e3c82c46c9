"""`jetgym-bench-fastjev`: FastJEV structure and cost on the embedded model (tiny hybrid for S).

Measures, side by side in one process (methods interleaved, median over rounds):
- logical candidate-token reduction of the trie on MMLU-285 and on synthetic workloads;
- latency of T+S+P (auto), the packed trie, S+P (no trie) and `jet` (packed) per workload, and the
  live cache bytes each keeps (`Usage.cache_bytes`; process peak RSS is not separable per method);
- S on a tiny random hybrid model: peak live state bytes under Copy/Keep vs Share/Drop;
- the calibration plot J_l (from docs/calibration) is linked; accuracy retention at k=0..10 when
  `retention=true` (6 QA runs on MMLU-285).
Writes the `fastjev` section of docs/benchmarks.md and docs/bench/fastjev.json.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from tqdm import tqdm

from scripts.benchmarks_doc import write_results


@dataclass
class BenchFastJevConfig:
    model: str = "smollm2-135m-instruct"
    candidates: list[int] = field(default_factory=lambda: [8, 64])
    lengths: list[int] = field(default_factory=lambda: [8, 32])
    shared: list[float] = field(default_factory=lambda: [0.0, 0.75])
    rounds: int = 2
    prefix_tokens: int = 64
    k: int = 6
    target_workload: bool = True  # 64 candidates x 128 tokens, 75% shared (flat), 1 round
    retention: bool = False
    retention_ks: list[int] = field(default_factory=lambda: [0, 2, 4, 6, 8, 10])
    write_doc: bool = True


ConfigStore.instance().store(name="bench_fastjev_schema", node=BenchFastJevConfig)


def synthetic(rng, n, length, shared, levels, prefix_tokens, vocab):
    from scorers.prompts import EncodedQuestion

    tok = lambda: rng.randrange(100, vocab)  # noqa: E731
    common = round(length * shared)
    prefix = tuple(tok() for _ in range(prefix_tokens))
    if levels == 1:
        stem = tuple(tok() for _ in range(common))
        cands = [stem + tuple(tok() for _ in range(length - common)) for _ in range(n)]
    else:
        top = tuple(tok() for _ in range(common // 2))
        mids = [tuple(tok() for _ in range(common - common // 2)) for _ in range(4)]
        cands = [top + mids[i % 4] + tuple(tok() for _ in range(length - common)) for i in range(n)]
    return EncodedQuestion(prefix, tuple(cands))


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_bench(cfg: BenchFastJevConfig) -> dict:
    import torch

    from envs.question_sets import load_mmlu
    from scorers import make_scorer
    from scorers.execution import score_packed
    from scorers.fastjev.pruning import calibration_path
    from scorers.fastjev.trie import CandidateTrie
    from scorers.models import load_model

    loaded = load_model(cfg.model)
    k = cfg.k if calibration_path(cfg.model).exists() else 0
    common = dict(model=loaded, template="none", pruning_k=k)
    scorers = {
        "T+S+P auto": make_scorer("fastjev", components=["T", "S", "P"], **common),
        "T+S+P packed": make_scorer("fastjev", components=["T", "S", "P"], schedule="packed", **common),
        "S+P": make_scorer("fastjev", components=["S", "P"], **common),
    }
    results = {"command": "jetgym-bench-fastjev " + " ".join(sys.argv[1:]), "cores": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "k": k, "skipped_layers": list(scorers["S+P"].skip)}

    # logical token reduction on MMLU-285
    tok = scorers["S+P"]
    merged = unmerged = 0
    for q in load_mmlu(subset="per_subject_5"):
        _, e = tok.encode(q)
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        merged += trie.logical_tokens
        unmerged += trie.unmerged_tokens
    results["mmlu285"] = {"unmerged": unmerged, "merged": merged, "reduction": 1 - merged / unmerged}

    methods = {name: (lambda s: lambda e: s.score_encoded([e])[0])(s) for name, s in scorers.items()}
    methods["jet"] = lambda e: score_packed(loaded.model, e, 1024)
    rng = random.Random(0)
    vocab = loaded.model.config.vocab_size
    grid = [(n, L, s, lv) for n in cfg.candidates for L in cfg.lengths for s in cfg.shared for lv in (1, 2)]
    if cfg.target_workload:
        grid.append((64, 128, 0.75, 1))
    workloads = []
    for n, L, s, lv in tqdm(grid, desc="workloads"):
        e = synthetic(rng, n, L, s, lv, cfg.prefix_tokens, vocab)
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        target = (n, L) == (64, 128)
        names = [m for m in methods if not (target and m == "jet")]
        rounds = 1 if target else cfg.rounds
        times = {m: [] for m in names}
        usage = {}
        for m in names:  # warm-up
            methods[m](e)
        for r in range(rounds):
            for m in names[r % len(names):] + names[: r % len(names)]:
                seconds, scored = _timed(lambda: methods[m](e))
                times[m].append(seconds)
                usage[m] = scored.work.cache_bytes
        plan = scorers["T+S+P auto"]
        plan.score_encoded([e])
        workloads.append({
            "candidates": n, "length": L, "shared": s, "levels": lv, "unmerged": trie.unmerged_tokens,
            "merged": trie.logical_tokens, "auto_plan": plan.last_plans[0],
            "seconds": {m: statistics.median(t) for m, t in times.items()}, "cache_bytes": usage,
        })
    results["workloads"] = workloads
    results["state"] = state_storage()
    if cfg.retention:
        results["retention"] = retention(cfg, loaded)
    if cfg.write_doc:
        write_results("fastjev", results, render(results))
    return results


def state_storage() -> list[dict]:
    """S on a tiny random hybrid (Qwen3.5: Gated DeltaNet + attention): Copy/Keep vs Share/Drop."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from scorers.fastjev.segmented import score_segmented
    from scorers.fastjev.trie import CandidateTrie

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_key_head_dim=32,
                               linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                               layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"])
    model = Qwen3_5ForCausalLM(config).eval()
    rows = []
    rng = random.Random(1)
    for n, L, s, lv in [(8, 16, 0.5, 2), (16, 16, 0.75, 2), (32, 8, 0.0, 1)]:
        e = synthetic(rng, n, L, s, lv, 32, 512)
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        share = score_segmented(model, e.prefix, trie, 1024, share=True)
        copy = score_segmented(model, e.prefix, trie, 1024, share=False)
        rows.append({"candidates": n, "length": L, "shared": s, "levels": lv,
                     "copy_keep_recurrent": copy.peak_recurrent_bytes, "share_drop_recurrent": share.peak_recurrent_bytes,
                     "copy_keep_total": copy.work.cache_bytes, "share_drop_total": share.work.cache_bytes,
                     "max_abs_delta": max(abs(a - b) for a, b in zip(share.logprobs, copy.logprobs))})
    return rows


def retention(cfg, loaded) -> list[dict]:
    from envs.question_sets import load_mmlu
    from scorers import make_scorer

    questions = load_mmlu(subset="per_subject_5")
    rows = []
    for k in cfg.retention_ks:
        scorer = make_scorer("fastjev", model=loaded, template="none", pruning_k=k)
        seconds, decisions = _timed(lambda: scorer.decide_many(questions))
        rows.append({"k": k, "accuracy": sum(d.correct for d in decisions) / len(decisions), "seconds": seconds})
    base = rows[0]["accuracy"]
    for row in rows:
        row["retention"] = row["accuracy"] / base if base else None
    return rows


def render(r: dict) -> str:
    m = r["mmlu285"]
    lines = [
        "## FastJEV (embedded model; tiny random hybrid for S)",
        "",
        f"Command: `{r['command']}` — fp32 CPU, {r['cores']} cores ({r['torch_threads']} torch threads); methods interleaved, "
        f"medians of the rounds. Pruning k={r['k']} (skipped layers {r['skipped_layers']}, 0-based, from "
        f"docs/calibration). Reduced grid (CPU budget): 8/64 candidates x 8/32 tokens x 0/75% shared x flat/two-level, "
        f"plus 64 x 128 x 75% (one round, no `jet`).",
        "",
        f"**Logical candidate tokens, MMLU-285:** {m['unmerged']} -> {m['merged']} (**{100 * m['reduction']:.2f}%** fewer).",
        "",
        "| cand | len | shared | levels | tokens -> trie | auto plan | T+S+P auto ms | T+S+P packed ms | S+P ms | jet ms | auto / best(trie, S+P) | packed speedup vs S+P |",
        "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    within = 0
    for w in r["workloads"]:
        s = w["seconds"]
        best = min(s["T+S+P packed"], s["S+P"])
        ratio = s["T+S+P auto"] / best
        within += ratio <= 1.05
        jet = f"{1000 * s['jet']:.0f}" if "jet" in s else "—"
        lines.append(
            f"| {w['candidates']} | {w['length']} | {100 * w['shared']:.0f}% | {w['levels']} | {w['unmerged']} -> {w['merged']} "
            f"({100 * (1 - w['merged'] / w['unmerged']):.1f}%) | {w['auto_plan']} | {1000 * s['T+S+P auto']:.0f} | "
            f"{1000 * s['T+S+P packed']:.0f} | {1000 * s['S+P']:.0f} | {jet} | {ratio:.2f} | {s['S+P'] / s['T+S+P packed']:.2f}x |"
        )
    lines += [
        "",
        f"`auto` within 5% of the faster of the packed trie and S+P on {within}/{len(r['workloads'])} workloads. "
        "Cache bytes kept per method are in docs/bench/fastjev.json (`cache_bytes`: peak live cache/state bytes "
        "for fastjev, the prefix cache for jet); a per-method peak RSS cannot be separated in one process on CPU.",
        "",
        "**S on a tiny random Qwen3.5 hybrid** (3 Gated DeltaNet + 1 attention layer), segmented trie, peak live bytes:",
        "",
        "| cand | len | shared | levels | recurrent Copy/Keep | recurrent Share/Drop | all states Copy/Keep | all states Share/Drop | max abs delta |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r["state"]:
        lines.append(f"| {s['candidates']} | {s['length']} | {100 * s['shared']:.0f}% | {s['levels']} | {s['copy_keep_recurrent']:,} | "
                     f"{s['share_drop_recurrent']:,} | {s['copy_keep_total']:,} | {s['share_drop_total']:,} | {s['max_abs_delta']:.1e} |")
    lines += ["", "Decision sensitivity J_l per layer (calibration): ![J_l](calibration/smollm2-135m-instruct_J.png)"]
    if "retention" in r:
        lines += ["", "| k | accuracy | retention | seconds |", "|---:|---:|---:|---:|"]
        lines += [f"| {x['k']} | {x['accuracy']:.4f} | {x['retention']:.4f} | {x['seconds']:.0f} |" for x in r["retention"]]
    else:
        lines += ["", "Retention sweep (k = 0..10 on MMLU-285) not run in this pass: `jetgym-bench-fastjev retention=true`."]
    return "\n".join(lines)


@hydra.main(config_path=str(Path(__file__).resolve().parents[1] / "conf"), config_name="bench_fastjev", version_base=None)
def main(cfg) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(render(run_bench(OmegaConf.to_object(cfg))))


if __name__ == "__main__":
    main()
