"""`python -m benchmarks.fastjev`: FastJEV structure and cost on the embedded model (tiny hybrid for S).

Protocol (docs/design.md, "Benchmark protocol"): the workload grid (default: the paper's 96 workloads) is split by a
seeded shuffle (`split_seed`) into a fitting half and a held-out half.
- Fitting half: the three plans `auto` picks from (T+S+P packed, T+S+P segmented, S+P = the flat plan) and
  `jet` (packed) run interleaved, `rounds` rounds each in a rotating order. `auto`'s two constants (the cost
  of a forward call and of one attention (query, key) pair, in token-equivalents) are fitted to these
  timings (`fit_plan_costs`).
- Held-out half: `auto` with the fitted constants, `auto` with the scorer's defaults, the three plans and
  `jet` run interleaved, `rounds` rounds each. Every statement about `auto` is made on this half only:
  its time over the faster of the packed trie and S+P, median over rounds and first pass, with intervals.
Also measured: logical candidate-token reduction of the trie on MMLU-285; the live cache bytes each method
keeps (`Usage.cache_bytes`; process peak RSS is not separable per method); achieved model FLOP/s per method
next to the peak of a large matmul in the model's dtype in the same run (`benchmarks.flops`); the cost of
a 1-token call measured directly (for comparison with the fitted one); S on a tiny random hybrid model (peak
live state bytes under Copy/Keep vs Share/Drop); accuracy retention at k=0..10 when `retention=true`
(6 QA runs on MMLU-285). Writes the `fastjev` section of docs/benchmarks.md and docs/bench/fastjev.json.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from tqdm import tqdm

from jetgym.questions.bootstrap import bootstrap
from benchmarks.doc import docs_dir, rotated, run_config, spread, write_results
from jetgym.scripts.config import CONFIG_PATH

AUTO_FITTED = "T+S+P auto (fitted)"
AUTO_DEFAULT = "T+S+P auto (defaults)"
PLAN_METHODS = {"packed": "T+S+P packed", "segmented": "T+S+P segmented", "flat": "S+P"}  # auto's plans, timed alone
BEST_OF = ("T+S+P packed", "S+P")  # `auto` is judged against the faster of these two


@dataclass
class BenchFastJevConfig:
    model: str = "smollm2-135m-instruct"
    candidates: list[int] = field(default_factory=lambda: [8, 16, 32, 64])
    lengths: list[int] = field(default_factory=lambda: [8, 32, 128])
    shared: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75])
    levels: list[int] = field(default_factory=lambda: [1, 2])
    rounds: int = 3  # every method, interleaved in a rotating order: median, interquartile range and first pass
    split_seed: int = 0  # seeded shuffle of the grid: its first half fits auto's constants, the rest judges auto
    prefix_tokens: int = 64
    k: int = 6
    retention: bool = False
    retention_ks: list[int] = field(default_factory=lambda: [0, 2, 4, 6, 8, 10])
    docs: bool = False  # also write docs/benchmarks.md and docs/bench/ (source checkout only)
    output_dir: Optional[str] = None  # the run folder (null: Hydra's run dir)
    summarize_from: Optional[str] = None  # a fastjev.json: recompute its summaries from its timings; nothing is timed

    def __post_init__(self):
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        size = len(self.candidates) * len(self.lengths) * len(self.shared) * len(self.levels)
        if size < 2:
            raise ValueError(
                f"the grid has {size} workload(s); it needs at least 2: one to fit auto's constants "
                "on and one to judge auto on"
            )


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


# ---------------------------------------------------------------- split, plan features and the fit (no torch)


def split_grid(n: int, seed: int) -> tuple[list[int], list[int]]:
    """(fitting, held-out) workload indices: `range(n)` shuffled by `random.Random(seed)`; the first n // 2 fit
    `auto`'s constants, the other n - n // 2 judge it. Disjoint, together the whole grid, each sorted."""
    if n < 2:
        raise ValueError(f"cannot split {n} workload(s) into a fitting and a held-out half: need at least 2")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return sorted(order[: n // 2]), sorted(order[n // 2 :])


def plan_features(encoded, capacity: int, attention_only: bool, pruned: bool) -> dict[str, tuple[float, float, float]]:
    """(forward calls, fed tokens, attention pairs) of each plan `auto` may pick for one question, as the
    scorer's planner counts them (`plan_costs` is linear in its two constants, so they are read off it)."""
    from jetgym.scorers.fastjev.plan import plan_costs
    from jetgym.scorers.fastjev.trie import CandidateTrie

    flat = CandidateTrie.build(len(encoded.prefix), encoded.continuations, share=False)
    shared = CandidateTrie.build(len(encoded.prefix), encoded.continuations)
    base, call, pair = (
        plan_costs(shared, flat, capacity, c, p, attention_only, pruned)
        for c, p in ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0))
    )
    return {plan: (call[plan] - base[plan], base[plan], pair[plan] - base[plan]) for plan in base}


def plan_cost(features: tuple[float, float, float], call_tokens: float, pair_cost: float) -> float:
    calls, fed, pairs = features
    return calls * call_tokens + fed + pair_cost * pairs


def chosen_plan(features: dict, call_tokens: float, pair_cost: float) -> str:
    """The plan `auto` picks with these constants (the scorer's rule, `plan.choose`)."""
    from jetgym.scorers.fastjev.plan import choose

    return choose({plan: plan_cost(f, call_tokens, pair_cost) for plan, f in features.items()})


@dataclass(frozen=True)
class CostFit:
    """`auto`'s constants fitted to plan timings: seconds ~ intercept + seconds_per_token * cost, where
    cost = calls * call_tokens + fed tokens + pair_cost * attention pairs (token-equivalents)."""

    call_tokens: float
    pair_cost: float
    seconds_per_token: float
    intercept: float
    observations: int
    rms_relative_error: float


def fit_plan_costs(rows) -> CostFit:
    """Fit `auto`'s call cost and pair cost to measured plan timings.

    rows: (features, seconds) per workload: `plan_features` and the median seconds of each plan.
    Least squares on relative error (each observation weighted by 1/seconds, as `auto` is judged by time
    ratios) of seconds = a + b_call * calls + b_tok * fed + b_pair * pairs, the three slopes kept >= 0 (a
    negative slope is dropped and the rest refitted); call_tokens = b_call / b_tok, pair_cost = b_pair / b_tok.
    """
    import numpy as np

    X, y = [], []
    for features, seconds in rows:
        for plan, f in features.items():
            if plan in seconds:
                X.append((1.0, *f))
                y.append(seconds[plan])
    if not X:
        raise ValueError("no plan timings to fit auto's constants on")
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    w = 1.0 / y
    free = [1, 2, 3]  # slopes of calls, fed tokens, pairs (the intercept, column 0, is always free)
    while True:
        cols = [0, *free]
        rank = np.linalg.matrix_rank(X[:, cols] * w[:, None])
        if rank < len(cols):
            raise ValueError(
                f"the plan timings cannot determine auto's constants ({len(y)} timings, rank {rank} of "
                f"{len(cols)} unknowns): use a grid with more, and more varied, workloads"
            )
        solution = np.linalg.lstsq(X[:, cols] * w[:, None], y * w, rcond=None)[0]
        coef = np.zeros(4)
        coef[cols] = solution
        negative = [c for c in free if coef[c] < 0]
        if not negative:
            break
        free.remove(min(negative, key=lambda c: coef[c]))
    if coef[2] <= 0:
        raise ValueError(
            "the fitted cost of a fed token is not positive: the timings do not grow with the tokens fed; "
            "use a grid with more varied workloads"
        )
    relative = (X @ coef - y) / y
    return CostFit(
        call_tokens=float(coef[1] / coef[2]),
        pair_cost=float(coef[3] / coef[2]),
        seconds_per_token=float(coef[2]),
        intercept=float(coef[0]),
        observations=len(y),
        rms_relative_error=float(np.sqrt(np.mean(relative**2))),
    )


def best_seconds(seconds: dict) -> float:
    return min(seconds[m] for m in BEST_OF)


def auto_ratio(times: dict[str, list[float]], auto: str) -> dict:
    """`auto` over the faster of the packed trie and S+P on one workload, round by round (the methods of a round
    run interleaved, so its ratio is paired): the median over rounds with its interquartile range, and the
    first pass (round 1's ratio)."""
    paired = [a / min(b) for a, *b in zip(times[auto], *(times[m] for m in BEST_OF))]
    return spread(paired)


def held_out_resolution(workloads: list[dict]) -> dict:
    """What the held-out ratios can resolve. `picked_faster`: workloads where fitted `auto` ran the plan with the
    lower median of (packed trie, S+P), or a plan faster than both. `repeat`: where the two `auto`s chose the same
    plan they ran identical work, so their paired ratio (fitted / defaults, per round) is the timing noise between
    two runs of one plan: its lowest and highest per-workload median over rounds and first pass."""
    held_out = [w for w in workloads if w["split"] == "held-out"]
    picked = sum(
        w["seconds"][PLAN_METHODS[w["auto_plan"][AUTO_FITTED]]] <= best_seconds(w["seconds"]) for w in held_out
    )
    same = [w for w in held_out if w["auto_plan"][AUTO_FITTED] == w["auto_plan"][AUTO_DEFAULT]]
    repeat = [spread([a / b for a, b in zip(w["times"][AUTO_FITTED], w["times"][AUTO_DEFAULT])]) for w in same]
    return {
        "workloads": len(held_out),
        "picked_faster": picked,
        "same_plan": len(same),
        "repeat": {
            key: [min(r[key] for r in repeat), max(r[key] for r in repeat)] if repeat else None
            for key in ("median", "first")
        },
    }


def ratio_summary(values: list[float], seed: int = 0) -> dict:
    """Mean (with a 95% bootstrap interval over workloads), median and worst of per-workload ratios."""
    interval = bootstrap(values, seed=seed)
    return {
        "workloads": len(values),
        "mean": statistics.mean(values),
        "mean_interval_95": [interval.low, interval.high],
        "median": statistics.median(values),
        "worst": max(values),
        "best": min(values),
    }


def summarize(results: dict) -> dict:
    """Fill in what `results` derives from its per-workload timings: the fitted plan's in-sample ratio, `auto`'s
    held-out ratios (per workload, and their mean with a bootstrap interval over workloads) and what those can
    resolve. A run's stored fastjev.json can be summarized again with nothing re-timed (`summarize_from`)."""
    workloads = results["workloads"]
    fitting = [w for w in workloads if w["split"] == "fit"]
    held_out = [w for w in workloads if w["split"] == "held-out"]
    results["fit"]["in_sample_ratio"] = ratio_summary(
        [w["seconds"][PLAN_METHODS[w["fitted_plan"]]] / best_seconds(w["seconds"]) for w in fitting]
    )
    for w in held_out:
        w["auto_ratio"] = {a: auto_ratio(w["times"], a) for a in (AUTO_FITTED, AUTO_DEFAULT)}
    results["held_out_auto"] = {
        a: {key: ratio_summary([w["auto_ratio"][a][key] for w in held_out]) for key in ("median", "first")}
        for a in (AUTO_FITTED, AUTO_DEFAULT)
    }
    results["held_out_resolution"] = held_out_resolution(workloads)
    return results


# ---------------------------------------------------------------- timing


def timed_rounds(methods: dict, question, rounds: int, offset: int = 0) -> tuple[dict, dict]:
    """(seconds per round, last result) per method; every method runs `rounds` times, interleaved, the order
    rotating each round (round r runs `rotated(methods, offset + r)`: give each workload its own offset, so
    no method is always first)."""
    names = list(methods)
    times = {m: [] for m in names}
    scored = {}
    for r in range(rounds):
        for m in rotated(names, offset + r):
            seconds, scored[m] = _timed(lambda: methods[m](question))
            times[m].append(seconds)
    return times, scored


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
    from benchmarks.flops import ModelFlops, dtype_name, matmul_peak, model_dtype

    loaded = load_model(cfg.model)
    k = cfg.k if calibration_path(cfg.model).exists() else 0
    common = dict(model=loaded, template="none", pruning_k=k)
    scorers = {
        AUTO_DEFAULT: make_scorer("fastjev", components=["T", "S", "P"], **common),
        PLAN_METHODS["packed"]: make_scorer("fastjev", components=["T", "S", "P"], schedule="packed", **common),
        PLAN_METHODS["segmented"]: make_scorer("fastjev", components=["T", "S", "P"], schedule="segmented", **common),
        PLAN_METHODS["flat"]: make_scorer("fastjev", components=["S", "P"], **common),
    }
    reference = scorers[AUTO_DEFAULT]
    skipped = {name: tuple(s.skip) for name, s in scorers.items()} | {"jet": (), AUTO_FITTED: tuple(reference.skip)}

    def method(scorer):
        return lambda e: scorer.score_encoded([e])[0]

    methods = {name: method(s) for name, s in scorers.items()}
    methods["jet"] = lambda e: score_packed(loaded.model, e, 1024)
    questions = grid_questions(cfg, loaded.model.config.vocab_size)
    fitting, held_out = split_grid(len(questions), cfg.split_seed)
    features = [
        plan_features(e, reference.options.max_batch_tokens, reference.packable, bool(reference.skip))
        for _, e in questions
    ]
    flops = ModelFlops.of(loaded.model)
    dtype = model_dtype(loaded.model)
    results = {
        "command": "python -m benchmarks.fastjev " + " ".join(sys.argv[1:]),
        "cores": os.cpu_count(),
        "rounds": cfg.rounds,
        "dtype": dtype_name(dtype),
        "prefix_tokens": cfg.prefix_tokens,
        "torch_threads": torch.get_num_threads(),
        "k": k,
        "skipped_layers": list(reference.skip),
        "split": {"seed": cfg.split_seed, "fitting": fitting, "held_out": held_out},
        "default_constants": {"call_tokens": reference.options.call_overhead_tokens, "pair_cost": reference.pair_cost},
    }

    # logical token reduction on MMLU-285
    merged = unmerged = 0
    for q in load_mmlu(subset="per_subject_5"):
        _, e = reference.encode(q)
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        merged += trie.logical_tokens
        unmerged += trie.unmerged_tokens
    results["mmlu285"] = {"unmerged": unmerged, "merged": merged, "reduction": 1 - merged / unmerged}

    results["call_overhead_tokens"] = call_overhead(loaded.model)
    results["matmul_peak_flops_per_second"] = matmul_peak(dtype)
    for m in methods:  # one warm-up for the process (lazy initialization, allocator)
        methods[m](questions[0][1])

    def measure(i, names, split):
        (n, L, s, lv), e = questions[i]
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        times, scored = timed_rounds({m: methods[m] for m in names}, e, cfg.rounds, offset=i * cfg.rounds)
        seconds = {m: statistics.median(t) for m, t in times.items()}
        model_flops = {m: flops(r.work.prefix_tokens, r.work.candidate_tokens, skipped[m]) for m, r in scored.items()}
        return {
            "candidates": n,
            "length": L,
            "shared": s,
            "levels": lv,
            "split": split,
            "unmerged": trie.unmerged_tokens,
            "merged": trie.logical_tokens,
            "plan_features": {p: list(f) for p, f in features[i].items()},
            "times": times,
            "seconds": seconds,
            "spread": {m: spread(t) for m, t in times.items()},
            "cache_bytes": {m: r.work.cache_bytes for m, r in scored.items()},
            "model_flops": model_flops,
        }

    plan_names = [*PLAN_METHODS.values(), "jet"]
    workloads: list[dict] = [{} for _ in questions]
    for i in tqdm(fitting, desc="fitting half"):
        workloads[i] = measure(i, plan_names, "fit")
    plan_of = {m: p for p, m in PLAN_METHODS.items()}
    defaults = results["default_constants"]
    try:
        fit = fit_plan_costs(
            [
                (features[i], {plan_of[m]: s for m, s in workloads[i]["seconds"].items() if m in plan_of})
                for i in fitting
            ]
        )
        constants = {"call_tokens": fit.call_tokens, "pair_cost": fit.pair_cost}
        results["fit"] = asdict(fit)
    except ValueError as error:  # the timings already taken stay useful: judge the defaults, and say so
        constants = dict(defaults)
        results["fit"] = {"error": str(error), **constants}
    fitted = make_scorer("fastjev", components=["T", "S", "P"], call_overhead_tokens=constants["call_tokens"], **common)
    fitted.pair_cost = constants["pair_cost"]  # the planner's pair cost (an attribute of the scorer, not an option)
    methods[AUTO_FITTED] = method(fitted)
    methods[AUTO_FITTED](questions[0][1])  # its warm-up
    for i in fitting:
        workloads[i]["fitted_plan"] = chosen_plan(features[i], constants["call_tokens"], constants["pair_cost"])
    results["fit"]["pair_cost_over_flop_estimate"] = (
        constants["pair_cost"] / defaults["pair_cost"] if defaults["pair_cost"] else None
    )

    for i in tqdm(held_out, desc="held-out half"):
        w = workloads[i] = measure(i, [AUTO_FITTED, AUTO_DEFAULT, *plan_names], "held-out")
        e = questions[i][1]
        w["auto_plan"] = {AUTO_FITTED: fitted.plan(e)[0], AUTO_DEFAULT: reference.plan(e)[0]}
    results["workloads"] = workloads
    summarize(results)
    results["model_flops_per_second"] = {
        m: sum(w["model_flops"][m] for w in workloads if m in w["seconds"])
        / sum(w["seconds"][m] for w in workloads if m in w["seconds"])
        for m in (AUTO_FITTED, AUTO_DEFAULT, *plan_names)
    }
    results["state"] = state_storage()
    if cfg.retention:
        results["retention"] = retention(cfg, loaded)
    return write_run(cfg, results)


def write_run(cfg: BenchFastJevConfig, results: dict) -> dict:
    """fastjev.json, the section and the speedup plot into the run folder (and docs/ with `docs`)."""
    plot_speedups(results["workloads"], Path(cfg.output_dir) / "fastjev_speedup.png")
    if cfg.docs:
        plot_speedups(results["workloads"], docs_dir() / "bench" / "fastjev_speedup.png")
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
    """Speedup over S+P of the packed trie (every workload) and `auto` with fitted constants (held-out half)
    against the trie's token reduction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, marker in ((AUTO_FITTED, "o"), (PLAN_METHODS["packed"], "x")):
        for length, color in zip(
            sorted({w["length"] for w in workloads}), ("tab:blue", "tab:orange", "tab:green", "tab:red")
        ):
            rows = [w for w in workloads if w["length"] == length and method in w["seconds"]]
            ax.scatter(
                [100 * (1 - w["merged"] / w["unmerged"]) for w in rows],
                [w["seconds"]["S+P"] / w["seconds"][method] for w in rows],
                marker=marker,
                color=color,
                alpha=0.7,
                label=f"{method}, {length} tokens",
            )
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("trie token reduction (%)")
    ax.set_ylabel("speedup over S+P (x)")
    ax.set_title("FastJEV on the synthetic grid (embedded model, CPU; auto: held-out half)")
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
    config = Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    )
    model = Qwen3_5ForCausalLM(config).eval()
    rows = []
    rng = random.Random(1)
    for n, L, s, lv in [(8, 16, 0.5, 2), (16, 16, 0.75, 2), (32, 8, 0.0, 1)]:
        e = synthetic(rng, n, L, s, lv, 32, 512)
        trie = CandidateTrie.build(len(e.prefix), e.continuations)
        share = score_segmented(model, e.prefix, trie, 1024, share=True)
        copy = score_segmented(model, e.prefix, trie, 1024, share=False)
        rows.append(
            {
                "candidates": n,
                "length": L,
                "shared": s,
                "levels": lv,
                "copy_keep_recurrent": copy.peak_recurrent_bytes,
                "share_drop_recurrent": share.peak_recurrent_bytes,
                "copy_keep_total": copy.work.cache_bytes,
                "share_drop_total": share.work.cache_bytes,
                "max_abs_delta": max(abs(a - b) for a, b in zip(share.logprobs, copy.logprobs)),
            }
        )
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


def _summary_text(s: dict) -> str:
    low, high = s["mean_interval_95"]
    return (
        f"mean {s['mean']:.3f} [95% bootstrap over workloads {low:.3f}, {high:.3f}], median {s['median']:.3f}, "
        f"worst {s['worst']:.3f} ({_within(s['worst'])})"
    )


def _within(worst: float) -> str:
    return "never slower" if worst <= 1 else f"within {100 * (worst - 1):.1f}% on every one"


def summary(r: dict) -> str:
    """`auto` against the faster of the packed trie and S+P on the held-out half: medians and first passes."""
    lines = []
    for auto, label in ((AUTO_FITTED, "the fitted constants"), (AUTO_DEFAULT, "the scorer's default constants")):
        s = r["held_out_auto"][auto]
        lines.append(
            f"- `auto` with {label}, its time / the faster of (packed trie, S+P), over the "
            f"{s['median']['workloads']} held-out workloads: median over rounds {_summary_text(s['median'])}; "
            f"first pass {_summary_text(s['first'])}."
        )
    h = r["held_out_resolution"]
    lines.append(
        f"- Plan choice: the fitted `auto` ran the faster of (packed trie, S+P), or a plan faster than both, on "
        f"{h['picked_faster']} of {h['workloads']} held-out workloads."
    )
    if h["repeat"]["median"]:
        (low, high), (first_low, first_high) = h["repeat"]["median"], h["repeat"]["first"]
        lines.append(
            f"- Resolution: on the {h['same_plan']} held-out workloads where both `auto`s chose the same plan, "
            f"they ran identical work; fitted / defaults per workload was {low:.3f}–{high:.3f} as the median "
            f"over rounds and {first_low:.3f}–{first_high:.3f} in the first pass. That is the timing noise "
            "between two runs of one plan in this run, which the ratios above carry as well."
        )
    return "\n".join(lines)


def _fit_text(r: dict) -> str:
    fit, d, in_sample = r["fit"], r["default_constants"], r["fit"]["in_sample_ratio"]
    measured = f"a 1-token call measured directly here: {r['call_overhead_tokens']:.0f}"
    if "error" in fit:
        head = (
            f"**The fit failed** ({fit['error']}): `auto (fitted)` below runs the scorer's default constants, call "
            f"cost {d['call_tokens']:.1f} token-equivalents ({measured}), pair cost {d['pair_cost']:.2e}."
        )
    else:
        head = (
            f"**Fitted constants** ({fit['observations']} plan timings, rms relative error "
            f"{100 * fit['rms_relative_error']:.1f}%): call cost **{fit['call_tokens']:.1f}** token-equivalents "
            f"(scorer default {d['call_tokens']:.0f}; {measured}); pair cost **{fit['pair_cost']:.2e}** "
            f"token-equivalents per attention pair (default, the FLOP estimate: {d['pair_cost']:.2e})."
        )
    return (
        head + f" In-sample (fitting half, the plan these constants pick, from the plan timings): mean "
        f"{in_sample['mean']:.3f}, worst {in_sample['worst']:.3f} of the faster of (packed trie, S+P)."
    )


def _ms(seconds: dict, method: str) -> str:
    return f"{1000 * seconds[method]:.0f}" if method in seconds else "—"


def render(r: dict) -> str:
    m, split = r["mmlu285"], r["split"]
    peak = r["matmul_peak_flops_per_second"]
    achieved = "; ".join(
        f"{name} {v / 1e9:.1f} ({100 * v / peak:.0f}%)" for name, v in r["model_flops_per_second"].items()
    )
    lines = [
        "## FastJEV (embedded model; tiny random hybrid for S)",
        "",
        f"Command: `{r['command']}` — {r['dtype']} CPU, {r['cores']} cores ({r['torch_threads']} torch threads). "
        f"{len(r['workloads'])} synthetic workloads (candidates x tokens x shared content x flat/two-level branching, "
        f"a {r['prefix_tokens']}-token prefix). Pruning k={r['k']} (skipped layers {r['skipped_layers']}, 0-based, from docs/calibration)."
        + (
            f" Summaries (ratios, bootstrap intervals) recomputed from that run's stored timings by `{r['summarized_by']}`; "
            "nothing was re-timed."
            if r.get("summarized_by")
            else ""
        ),
        "",
        f"**Protocol.** The grid is split by a seeded shuffle (seed {split['seed']}) into a fitting half "
        f"({len(split['fitting'])} workloads) and a held-out half ({len(split['held_out'])} workloads); the table's "
        "`split` column says which is which. Fitting half: the three plans `auto` picks from (T+S+P packed, T+S+P "
        f"segmented, S+P = the flat plan) and `jet` (packed) run interleaved, {r['rounds']} rounds each in a rotating "
        "order (each workload continues the rotation, so no method is always first), after one warm-up. `auto`'s two "
        "constants are fitted there, and only there: least squares on the relative error of the plans' median "
        "seconds, seconds = a + b (calls x call cost + fed tokens + pair cost x attention pairs), slopes kept >= 0. "
        "Held-out half: `auto` with the fitted constants, `auto` with the scorer's defaults, the three plans and "
        f"`jet` run interleaved, {r['rounds']} rounds each. Every result on "
        "`auto` below is on the held-out half only: per workload, `auto`'s seconds over the faster of the packed trie "
        "and S+P in the same round, as the median over rounds [interquartile range] and as the first pass. Times in "
        "the table are medians over rounds; every round's seconds are in fastjev.json. Nothing is re-timed.",
        "",
        _fit_text(r),
        "",
        "**`auto` vs the faster of the packed trie and S+P, held-out half:**",
        "",
        summary(r),
        "",
        f"**Distance to the hardware limit.** Peak of a 2048 x 2048 {r['dtype']} matmul in this run: "
        f"**{peak / 1e9:.0f} GFLOP/s**. Achieved model GFLOP/s over the workloads each method ran (model FLOPs of the "
        f"tokens it fed, skipped layers excluded, / its median seconds; share of the peak): {achieved}.",
        "",
        f"**Logical candidate tokens, MMLU-285:** {m['unmerged']} -> {m['merged']} (**{100 * m['reduction']:.2f}%** fewer).",
        "",
        "![speedup over S+P](bench/fastjev_speedup.png)",
        "",
        "| split | cand | len | shared | levels | tokens -> trie | auto plan fitted / defaults | auto fitted ms | "
        "auto defaults ms | packed ms | segmented ms | S+P ms | jet ms | auto fitted / best(trie, S+P) [IQR of rounds] | "
        "packed speedup vs S+P | model GFLOP/s packed / S+P / jet | kept cache kB packed / S+P / jet |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|",
    ]
    packed, flat = PLAN_METHODS["packed"], PLAN_METHODS["flat"]
    for w in r["workloads"]:
        s = w["seconds"]
        if w["split"] == "held-out":
            plans = f"{w['auto_plan'][AUTO_FITTED]} / {w['auto_plan'][AUTO_DEFAULT]}"
            a = w["auto_ratio"][AUTO_FITTED]
            ratio = f"{a['median']:.2f} [{a['q1']:.2f}, {a['q3']:.2f}]"
        else:
            plans, ratio = f"({w['fitted_plan']}) / —", "— (fitting)"
        gflops = " / ".join(f"{w['model_flops'][x] / s[x] / 1e9:.1f}" for x in (packed, flat, "jet"))
        kb = " / ".join(f"{w['cache_bytes'][x] / 1024:,.0f}" for x in (packed, flat, "jet"))
        lines.append(
            f"| {w['split']} | {w['candidates']} | {w['length']} | {100 * w['shared']:.0f}% | {w['levels']} | "
            f"{w['unmerged']} -> {w['merged']} ({100 * (1 - w['merged'] / w['unmerged']):.1f}%) | {plans} | "
            f"{_ms(s, AUTO_FITTED)} | {_ms(s, AUTO_DEFAULT)} | {_ms(s, packed)} | {_ms(s, PLAN_METHODS['segmented'])} | "
            f"{_ms(s, flat)} | {_ms(s, 'jet')} | {ratio} | {s[flat] / s[packed]:.2f}x | {gflops} | {kb} |"
        )
    lines += [
        "",
        "Fitting rows show in parentheses the plan the fitted constants pick (`auto` itself is not timed there). "
        "Kept cache kB: peak bytes of cache/state kept between forward calls (0 = one call, nothing kept; "
        "docs/bench/fastjev.json `cache_bytes`); a per-method peak RSS cannot be separated in one process on CPU.",
        "",
        "**S on a tiny random Qwen3.5 hybrid** (3 Gated DeltaNet + 1 attention layer), segmented trie, peak live bytes:",
        "",
        "| cand | len | shared | levels | recurrent Copy/Keep | recurrent Share/Drop | all states Copy/Keep | all states Share/Drop | max abs delta |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r["state"]:
        lines.append(
            f"| {s['candidates']} | {s['length']} | {100 * s['shared']:.0f}% | {s['levels']} | {s['copy_keep_recurrent']:,} | "
            f"{s['share_drop_recurrent']:,} | {s['copy_keep_total']:,} | {s['share_drop_total']:,} | {s['max_abs_delta']:.1e} |"
        )
    lines += ["", "Decision sensitivity J_l per layer (calibration): ![J_l](calibration/smollm2-135m-instruct_J.png)"]
    if "retention" in r:
        lines += ["", "| k | accuracy | retention | seconds |", "|---:|---:|---:|---:|"]
        lines += [
            f"| {x['k']} | {x['accuracy']:.4f} | {x['retention']:.4f} | {x['seconds']:.0f} |" for x in r["retention"]
        ]
    else:
        lines += [
            "",
            "Retention sweep (k = 0..10 on MMLU-285) not run in this pass: `python -m benchmarks.fastjev retention=true`.",
        ]
    return "\n".join(lines)


@hydra.main(config_path=CONFIG_PATH, config_name="bench_fastjev", version_base=None)
def main(cfg) -> None:
    config = run_config(cfg)
    print(render(summarize_again(config) if config.summarize_from else run_bench(config)))


def summarize_again(cfg: BenchFastJevConfig) -> dict:
    """The stored run `summarize_from`, summarized by the current code (`summarize`), written like a new run."""
    import json

    path = Path(cfg.summarize_from)
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"summarize_from={path}: cannot read a fastjev.json there ({error})") from None
    if not isinstance(results, dict) or not results.get("workloads"):
        raise ValueError(
            f"summarize_from={path}: no per-workload timings ('workloads') in it; pass the fastjev.json "
            "a python -m benchmarks.fastjev run wrote"
        )
    results["summarized_by"] = "python -m benchmarks.fastjev " + " ".join(sys.argv[1:])
    return write_run(cfg, summarize(results))


if __name__ == "__main__":
    main()
