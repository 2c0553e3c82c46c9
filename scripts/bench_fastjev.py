"""`jetgym-bench-fastjev`: FastJEV structure and cost on the embedded model (tiny hybrid for S).

Measures, side by side in one process (methods interleaved, median over rounds):
- logical candidate-token reduction of the trie on MMLU-285 and on synthetic workloads;
- latency of T+S+P (auto), the packed trie, S+P (no trie) and `jet` (packed) per workload (default: the
  paper's 96-workload grid), the live cache bytes each keeps (`Usage.cache_bytes`; process peak RSS is not
  separable per method), and a plot of speedup over S+P against the trie's token reduction;
- the cost of one forward call in token-equivalents (the `call_overhead_tokens` of `auto`);
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
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from tqdm import tqdm

from jetgym.scripts.config import CONFIG_PATH
from jetgym.scripts.benchmarks_doc import docs_dir, run_config, write_results


@dataclass
class BenchFastJevConfig:
    model: str = "smollm2-135m-instruct"
    candidates: list[int] = field(default_factory=lambda: [8, 16, 32, 64])
    lengths: list[int] = field(default_factory=lambda: [8, 32, 128])
    shared: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75])
    levels: list[int] = field(default_factory=lambda: [1, 2])
    rounds: int = 3  # every method, interleaved in a rotating order: median, interquartile range and first pass
    prefix_tokens: int = 64
    k: int = 6
    retention: bool = False
    retention_ks: list[int] = field(default_factory=lambda: [0, 2, 4, 6, 8, 10])
    docs: bool = False  # also write docs/benchmarks.md and docs/bench/ (source checkout only)
    output_dir: Optional[str] = None  # the run folder (null: Hydra's run dir)


ConfigStore.instance().store(name="bench_fastjev_schema", node=BenchFastJevConfig)


def synthetic(rng, n, length, shared, levels, prefix_tokens, vocab):
    from jetgym.scorers.prompts import EncodedQuestion

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


def grid_questions(cfg: BenchFastJevConfig, vocab: int) -> list:
    """((candidates, length, shared, levels), encoded question) over the grid, drawn in order from one seed."""
    rng = random.Random(0)
    grid = [(n, L, s, lv) for n in cfg.candidates for L in cfg.lengths for s in cfg.shared for lv in cfg.levels]
    return [(key, synthetic(rng, *key, cfg.prefix_tokens, vocab)) for key in grid]


def timed_rounds(methods: dict, question, rounds: int) -> tuple[dict, dict, dict]:
    """(median seconds, timings {first, q1, q3}, cache bytes) per method; every method runs `rounds` times,
    interleaved, the order rotating each round."""
    names = list(methods)
    times = {m: [] for m in names}
    usage = {}
    for r in range(rounds):
        for m in names[r % len(names):] + names[: r % len(names)]:
            seconds, scored = _timed(lambda: methods[m](question))
            times[m].append(seconds)
            usage[m] = scored.work.cache_bytes
    spread = {m: {"first": t[0], "q1": _quantile(t, 0.25), "q3": _quantile(t, 0.75)} for m, t in times.items()}
    return {m: statistics.median(t) for m, t in times.items()}, spread, usage


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def auto_ratio(seconds: dict) -> float:
    return seconds["T+S+P auto"] / min(seconds["T+S+P packed"], seconds["S+P"])


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_bench(cfg: BenchFastJevConfig) -> dict:
    import torch

    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers import make_scorer
    from jetgym.scorers.execution import score_packed
    from jetgym.scorers.fastjev.pruning import calibration_path
    from jetgym.scorers.fastjev.trie import CandidateTrie
    from jetgym.scorers.models import load_model

    loaded = load_model(cfg.model)
    k = cfg.k if calibration_path(cfg.model).exists() else 0
    common = dict(model=loaded, template="none", pruning_k=k)
    scorers = {
        "T+S+P auto": make_scorer("fastjev", components=["T", "S", "P"], **common),
        "T+S+P packed": make_scorer("fastjev", components=["T", "S", "P"], schedule="packed", **common),
        "S+P": make_scorer("fastjev", components=["S", "P"], **common),
    }
    methods = {name: (lambda s: lambda e: s.score_encoded([e])[0])(s) for name, s in scorers.items()}
    methods["jet"] = lambda e: score_packed(loaded.model, e, 1024)
    questions = grid_questions(cfg, loaded.model.config.vocab_size)
    results = {"command": "jetgym-bench-fastjev " + " ".join(sys.argv[1:]), "cores": os.cpu_count(),
               "rounds": cfg.rounds,
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

    results["call_overhead_tokens"] = call_overhead(loaded.model)
    for m in methods:  # one warm-up for the process (lazy initialization, allocator)
        methods[m](questions[0][1])
    workloads = []
    for (n, L, s, lv), e in tqdm(questions, desc="workloads"):
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        seconds, spread, usage = timed_rounds(methods, e, cfg.rounds)
        workloads.append({
            "candidates": n, "length": L, "shared": s, "levels": lv, "unmerged": trie.unmerged_tokens,
            "merged": trie.logical_tokens, "auto_plan": scorers["T+S+P auto"].last_plans[0], "seconds": seconds, "spread": spread, "cache_bytes": usage,
        })
    results["workloads"] = workloads
    results["state"] = state_storage()
    if cfg.retention:
        results["retention"] = retention(cfg, loaded)
    plot_speedups(workloads, Path(cfg.output_dir) / "fastjev_speedup.png")
    if cfg.docs:
        plot_speedups(workloads, docs_dir() / "bench" / "fastjev_speedup.png")
    write_results(cfg.output_dir, "fastjev", results, render(results), docs=cfg.docs)
    return results


def call_overhead(model, sizes=(1, 64, 256), repeats: int = 7) -> float:
    """Seconds of a 1-token forward over the per-token cost (slope between 64 and 256 tokens), no cache."""
    import torch

    def seconds(n):
        ids = torch.randint(100, 1000, (1, n))
        with torch.inference_mode():
            model(input_ids=ids, logits_to_keep=1)
            return statistics.median(_timed(lambda: model(input_ids=ids, logits_to_keep=1))[0] for _ in range(repeats))

    one, small, large = (seconds(n) for n in sizes)
    per_token = (large - small) / (sizes[2] - sizes[1])
    return (one - per_token) / per_token


def plot_speedups(workloads: list[dict], path: Path) -> None:
    """Speedup over S+P of T+S+P (auto) and the packed trie against the trie's token reduction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, marker in (("T+S+P auto", "o"), ("T+S+P packed", "x")):
        for length, color in zip(sorted({w["length"] for w in workloads}), ("tab:blue", "tab:orange", "tab:green", "tab:red")):
            rows = [w for w in workloads if w["length"] == length]
            ax.scatter([100 * (1 - w["merged"] / w["unmerged"]) for w in rows],
                       [w["seconds"]["S+P"] / w["seconds"][method] for w in rows],
                       marker=marker, color=color, alpha=0.7, label=f"{method}, {length} tokens")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("trie token reduction (%)")
    ax.set_ylabel("speedup over S+P (x)")
    ax.set_title("FastJEV on the synthetic grid (embedded model, CPU)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def state_storage() -> list[dict]:
    """S on a tiny random hybrid (Qwen3.5: Gated DeltaNet + attention): Copy/Keep vs Share/Drop."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from jetgym.scorers.fastjev.segmented import score_segmented
    from jetgym.scorers.fastjev.trie import CandidateTrie

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
    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers import make_scorer

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


def summary(r: dict) -> str:
    """`auto` against the faster of the packed trie and S+P over the workloads: medians and first passes."""
    rows = r["workloads"]
    ratios = sorted(auto_ratio(w["seconds"]) for w in rows)
    text = (f"`auto` / faster of (packed trie, S+P), median over rounds: median {statistics.median(ratios):.2f}, "
            f"worst {ratios[-1]:.2f} over {len(rows)} workloads")
    if all("spread" in w for w in rows):
        first = sorted(auto_ratio({m: w["spread"][m]["first"] for m in w["spread"]}) for w in rows)
        text += f"; first pass only: median {statistics.median(first):.2f}, worst {first[-1]:.2f}"
    return text + "."


def render(r: dict) -> str:
    m = r["mmlu285"]
    lines = [
        "## FastJEV (embedded model; tiny random hybrid for S)",
        "",
        f"Command: `{r['command']}` — fp32 CPU, {r['cores']} cores ({r['torch_threads']} torch threads). Per workload "
        f"(candidates x tokens x shared content x flat/two-level branching, {len(r['workloads'])} workloads, a 64-token "
        f"prefix): T+S+P auto, T+S+P packed, S+P and `jet` (packed) interleaved, median of {r['rounds']} "
        f"rounds each (interquartile ranges and first passes in fastjev.json). `auto`'s call cost is measured, not "
        f"fitted to these timings. Pruning k={r['k']} (skipped layers {r['skipped_layers']}, 0-based, from docs/calibration). "
        f"`auto` cost of one call, measured here: {r['call_overhead_tokens']:.0f} token-equivalents.",
        "",
        f"**Logical candidate tokens, MMLU-285:** {m['unmerged']} -> {m['merged']} (**{100 * m['reduction']:.2f}%** fewer).",
        "",
        f"**auto vs the best plan:** {summary(r)}",
        "",
        "![speedup over S+P](bench/fastjev_speedup.png)",
        "",
        "| cand | len | shared | levels | tokens -> trie | auto plan | T+S+P auto ms | T+S+P packed ms | S+P ms | jet ms | auto / best(trie, S+P) | packed speedup vs S+P | kept cache kB auto / S+P / jet |",
        "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in r["workloads"]:
        s = w["seconds"]
        ratio = f"{auto_ratio(s):.2f}"
        jet = f"{1000 * s['jet']:.0f}" if "jet" in s else "—"
        kb = " / ".join(f"{w['cache_bytes'][m] / 1024:,.0f}" for m in ("T+S+P auto", "S+P", "jet") if m in w["cache_bytes"])
        lines.append(
            f"| {w['candidates']} | {w['length']} | {100 * w['shared']:.0f}% | {w['levels']} | {w['unmerged']} -> {w['merged']} "
            f"({100 * (1 - w['merged'] / w['unmerged']):.1f}%) | {w['auto_plan']} | {1000 * s['T+S+P auto']:.0f} | "
            f"{1000 * s['T+S+P packed']:.0f} | {1000 * s['S+P']:.0f} | {jet} | {ratio} | {s['S+P'] / s['T+S+P packed']:.2f}x | {kb} |"
        )
    lines += [
        "",
        "Kept cache kB: peak bytes of cache/state kept between forward calls (0 = one call, nothing kept; "
        "docs/bench/fastjev.json `cache_bytes`); a per-method peak RSS cannot be separated in one process on CPU.",
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


@hydra.main(config_path=CONFIG_PATH, config_name="bench_fastjev", version_base=None)
def main(cfg) -> None:
    config = run_config(cfg)
    print(render(run_bench(config)))


if __name__ == "__main__":
    main()
