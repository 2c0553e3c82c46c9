"""The benchmark protocol's pure parts: interleaving, summaries, the fitting/held-out split of the FastJEV grid,
the fit of `auto`'s constants, and the model FLOP counter."""

from __future__ import annotations

import random
import statistics

import pytest

from benchmarks.scoring import BenchConfig, per_question_summary
from benchmarks.fastjev import (
    BenchFastJevConfig,
    auto_ratio,
    chosen_plan,
    fit_plan_costs,
    grid_questions,
    held_out_resolution,
    plan_cost,
    plan_features,
    split_grid,
    summarize,
    summarize_again,
)
from jetgym.questions.bootstrap import bootstrap
from benchmarks.doc import rotated, spread


# ---------------------------------------------------------------- interleaving and summaries


def test_rotation_lets_every_method_lead_once_per_cycle():
    names = ["a", "b", "c"]
    orders = [rotated(names, r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert rotated(names, 4) == orders[1]
    assert all(sorted(o) == names for o in orders)


def test_spread_keeps_the_first_pass_and_the_quartiles():
    assert spread([5.0, 1.0, 3.0]) == {"first": 5.0, "median": 3.0, "q1": 2.0, "q3": 4.0}
    assert spread([2.0]) == {"first": 2.0, "median": 2.0, "q1": 2.0, "q3": 2.0}
    with pytest.raises(ValueError, match="spread of no timings"):
        spread([])


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [1.0, 1.1, 0.9, 1.3, 1.0, 0.95]
    found = bootstrap(values)
    assert found == bootstrap(values) and found != bootstrap(values, seed=1)
    assert found.estimate == pytest.approx(sum(values) / len(values)) and found.low <= found.estimate <= found.high
    assert (bootstrap([2.0, 2.0]).low, bootstrap([2.0, 2.0]).high) == (2.0, 2.0)


def test_plain_bootstrap_with_a_statistic_resamples_the_same_draws_as_the_mean():
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    mean = bootstrap(values, samples=300, seed=4)
    by_function = bootstrap(values, lambda sample: sum(sample) / len(sample), samples=300, seed=4)
    assert (by_function.low, by_function.high, by_function.estimate) == pytest.approx(
        (mean.low, mean.high, mean.estimate)
    )
    median = bootstrap(values, statistics.median, samples=300, seed=4)
    assert median.estimate == 1.0 and median.samples == 300 and median.clusters == len(values)
    with pytest.raises(ValueError, match="the bootstrap needs at least one value"):
        bootstrap([])


def test_per_question_summary_reports_medians_quartiles_and_first_pass():
    times = [[3.0, 1.0, 2.0], [4.0, 6.0, 5.0], [9.0, 7.0, 8.0]]  # per-question medians 2, 5, 8
    s = per_question_summary(times)
    assert (s["median"], s["q1"], s["q3"]) == (5.0, 3.5, 6.5)
    assert s["first_pass"] == 4.0 and s["total_median"] == 15.0


def test_auto_ratio_uses_the_faster_of_packed_and_flat_per_round():
    times = {"A": [1.0, 2.0, 3.0], "T+S+P packed": [1.0, 4.0, 2.0], "S+P": [2.0, 1.0, 3.0]}
    r = auto_ratio(times, "A")  # paired per-round ratios: 1 / min(1, 2), 2 / min(4, 1), 3 / min(2, 3)
    assert r == {"first": 1.0, "median": 1.5, "q1": 1.25, "q3": 1.75}


def test_held_out_resolution_counts_faster_picks_and_the_repeat_noise_of_one_plan():
    def workload(split, plans, packed, flat, segmented, fitted_times, default_times):
        seconds = {"T+S+P packed": packed, "S+P": flat, "T+S+P segmented": segmented}
        return {
            "split": split,
            "seconds": seconds,
            "auto_plan": {"T+S+P auto (fitted)": plans[0], "T+S+P auto (defaults)": plans[1]},
            "times": {"T+S+P auto (fitted)": fitted_times, "T+S+P auto (defaults)": default_times},
        }

    workloads = [
        workload(
            "held-out", ("packed", "packed"), 1.0, 2.0, 3.0, [1.0, 1.1, 1.2], [1.0, 1.0, 1.0]
        ),  # right; noise 1.1 / 1.0
        workload(
            "held-out", ("flat", "packed"), 1.0, 2.0, 3.0, [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]
        ),  # slower plan; not paired
        workload(
            "held-out", ("segmented", "segmented"), 2.0, 2.0, 1.0, [0.8, 1.0, 0.9], [1.0, 1.0, 1.0]
        ),  # faster than both
        workload("fitting", ("flat", "flat"), 1.0, 2.0, 3.0, [9.0, 9.0, 9.0], [1.0, 1.0, 1.0]),  # not judged
    ]
    h = held_out_resolution(workloads)
    assert (h["workloads"], h["picked_faster"], h["same_plan"]) == (3, 2, 2)
    assert h["repeat"]["median"] == pytest.approx([0.9, 1.1])
    assert h["repeat"]["first"] == pytest.approx([0.8, 1.0])


def test_summaries_come_from_the_stored_timings_alone(tmp_path):
    """`summarize` derives the ratios and intervals from the per-workload times, so a stored run can be summarized
    again without timing; a file without timings is refused naming `summarize_from`."""
    fitted, default = "T+S+P auto (fitted)", "T+S+P auto (defaults)"

    def workload(split, auto_times):
        times = {
            "T+S+P packed": [1.0, 1.0],
            "S+P": [2.0, 0.5],
            "T+S+P segmented": [3.0, 3.0],
            fitted: auto_times,
            default: auto_times,
        }
        return {
            "split": split,
            "times": times,
            "seconds": {m: statistics.median(t) for m, t in times.items()},
            "fitted_plan": "segmented",
            "auto_plan": {fitted: "packed", default: "packed"},
        }

    results = {
        "fit": {},
        "workloads": [workload("fit", [1.0, 1.0]), workload("held-out", [1.0, 1.0]), workload("held-out", [2.0, 0.5])],
    }
    summarize(results)
    assert (
        results["fit"]["in_sample_ratio"]["mean"] == 3.0
    )  # segmented 3.0 over the lower median (packed 1.0, S+P 1.25)
    ratios = [w["auto_ratio"][fitted] for w in results["workloads"][1:]]
    assert [r["first"] for r in ratios] == [1.0, 2.0] and [r["median"] for r in ratios] == [1.5, 1.5]
    held = results["held_out_auto"][fitted]["first"]
    assert (held["mean"], held["worst"]) == (1.5, 2.0) and held["mean_interval_95"] == [1.0, 2.0]
    (tmp_path / "empty.json").write_text("{}")
    for path, message in (
        (tmp_path / "none.json", "cannot read a fastjev.json there"),
        (tmp_path / "empty.json", "no per-workload timings"),
    ):
        with pytest.raises(ValueError, match=f"summarize_from={path}: {message}"):
            summarize_again(BenchFastJevConfig(summarize_from=str(path), output_dir=str(tmp_path)))


def test_bench_configs_reject_bad_protocol_settings():
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        BenchFastJevConfig(rounds=0)
    with pytest.raises(ValueError, match="the grid has 1 workload"):
        BenchFastJevConfig(candidates=[8], lengths=[8], shared=[0.0], levels=[1])
    with pytest.raises(ValueError, match="whole_set_rounds must be >= 1, got 0"):
        BenchConfig(whole_set_rounds=0)
    with pytest.raises(ValueError, match="placement.dtype"):
        BenchConfig(dtype="fp16")


# ---------------------------------------------------------------- the split


@pytest.mark.parametrize("n", [2, 5, 96])
def test_split_is_deterministic_disjoint_and_covers_the_grid(n):
    fitting, held_out = split_grid(n, 0)
    assert (fitting, held_out) == split_grid(n, 0)
    assert not set(fitting) & set(held_out)
    assert sorted(fitting + held_out) == list(range(n))
    assert len(fitting) == n // 2 and fitting == sorted(fitting) and held_out == sorted(held_out)


def test_split_depends_on_the_seed_and_mixes_the_grid():
    assert split_grid(96, 0) != split_grid(96, 1)
    fitting, _ = split_grid(96, 0)
    assert fitting != list(range(48))  # not simply the first half of the grid order
    with pytest.raises(ValueError, match="cannot split 1 workload"):
        split_grid(1, 0)


# ---------------------------------------------------------------- the fit of auto's constants


def _grid():
    cfg = BenchFastJevConfig(
        candidates=[4, 16, 64], lengths=[4, 16, 64], shared=[0.0, 0.5, 0.75], levels=[1, 2], prefix_tokens=32
    )
    return [plan_features(e, 1024, True, True) for _, e in grid_questions(cfg, 1000)]


def _timings(features, call_tokens, pair_cost, intercept=0.2, per_token=1.5e-3, noise=0.0, seed=0):
    rng = random.Random(seed)
    return [
        (
            f,
            {
                plan: (intercept + per_token * plan_cost(x, call_tokens, pair_cost)) * (1 + rng.uniform(-noise, noise))
                for plan, x in f.items()
            },
        )
        for f in features
    ]


def test_plan_features_reproduce_the_planners_costs():
    from jetgym.scorers.fastjev.plan import plan_costs
    from jetgym.scorers.fastjev.trie import CandidateTrie

    cfg = BenchFastJevConfig(candidates=[16], lengths=[16], shared=[0.5], levels=[1, 2], prefix_tokens=32)
    _, e = grid_questions(cfg, 1000)[1]  # two-level branching
    flat = CandidateTrie.build(len(e.prefix), e.continuations, share=False)
    shared = CandidateTrie.build(len(e.prefix), e.continuations)
    expected = plan_costs(shared, flat, 1024, 40.0, 3e-4, True, True)
    features = plan_features(e, 1024, True, True)
    assert set(features) == {"flat", "segmented", "packed"}
    for plan, cost in expected.items():
        assert plan_cost(features[plan], 40.0, 3e-4) == pytest.approx(cost, rel=1e-12)


def test_fit_recovers_known_constants_from_synthetic_timings():
    features = _grid()
    fit = fit_plan_costs(_timings(features, 40.0, 3e-4))
    assert fit.call_tokens == pytest.approx(40.0, rel=1e-6)
    assert fit.pair_cost == pytest.approx(3e-4, rel=1e-6)
    assert fit.intercept == pytest.approx(0.2, rel=1e-6) and fit.seconds_per_token == pytest.approx(1.5e-3, rel=1e-6)
    assert fit.observations == 3 * len(features) and fit.rms_relative_error < 1e-9


def test_fit_under_timing_noise_picks_the_plans_the_true_constants_pick():
    features = _grid()
    fit = fit_plan_costs(_timings(features, 40.0, 3e-4, noise=0.02))
    assert fit.call_tokens == pytest.approx(40.0, rel=0.05)
    assert fit.pair_cost == pytest.approx(3e-4, rel=0.6)  # pairs are a few % of the cost here: weakly identified
    truth = _timings(features, 40.0, 3e-4)
    ratios = [seconds[chosen_plan(f, fit.call_tokens, fit.pair_cost)] / min(seconds.values()) for f, seconds in truth]
    assert max(ratios) < 1.05


def test_fit_keeps_the_constants_non_negative():
    features = _grid()
    fit = fit_plan_costs(_timings(features, -20.0, 3e-4))  # timings where more calls are faster
    assert fit.call_tokens == 0.0 and fit.pair_cost >= 0 and fit.seconds_per_token > 0


def test_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="no plan timings"):
        fit_plan_costs([])
    one = _timings(_grid()[:1], 40.0, 3e-4)  # 3 timings, 4 unknowns
    with pytest.raises(ValueError, match=r"cannot determine auto's constants \(3 timings, rank [0-3] of 4 unknowns\)"):
        fit_plan_costs(one)
    features = _grid()
    shrinking = [(f, {p: 1.0 / (1.0 + x[1]) for p, x in f.items()}) for f in features]  # faster with more tokens
    with pytest.raises(ValueError, match="fitted cost of a fed token is not positive"):
        fit_plan_costs(shrinking)


# ---------------------------------------------------------------- model FLOPs


def test_model_flops_equal_a_hand_count_on_a_tiny_llama():
    from tiny_models import tiny_llama

    from benchmarks.flops import ModelFlops

    # hidden 32, intermediate 64, 4 heads of 8, 2 key/value heads, vocab 101, 2 layers:
    # per layer q 32x32 + k 32x16 + v 32x16 + o 32x32 + gate/up/down 3 x 32x64 = 9216 weights -> 18,432 FLOPs;
    # head 101 x 32 = 3232 weights -> 6,464 FLOPs; norms (vectors) and the input embedding (a lookup) count 0.
    flops = ModelFlops.of(tiny_llama())
    assert flops.per_layer == (18432.0, 18432.0) and flops.rest == 0.0 and flops.head == 6464.0
    assert flops.per_token() == 2 * 18432 + 6464
    # 10 prefix tokens through both layers, no logits; 5 candidate tokens skipping layer 1, with logits
    assert flops(10, 5, skipped=(1,)) == 10 * 2 * 18432 + 5 * (18432 + 6464)


def test_model_flops_count_a_tied_head():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.flops import ModelFlops

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval()
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert ModelFlops.of(model).head == 6464.0


def test_matmul_peak_is_a_rate():
    import torch

    from benchmarks.flops import dtype_name, matmul_peak

    assert matmul_peak(torch.float32, size=64, repeats=2) > 0
    assert dtype_name(torch.bfloat16) == "bfloat16"
