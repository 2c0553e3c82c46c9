"""`python -m benchmarks.lm_eval`'s agreement and report from results shaped as lm-eval's (no model run here)."""

from __future__ import annotations

import pytest

from benchmarks.lm_eval import agreement, main, render


def results(values, acc):
    samples = [{"doc_id": i, "filtered_resps": [list(v) for v in doc]} for i, doc in enumerate(values)]
    return {"samples": {"t": samples}, "results": {"t": {"alias": "t", "acc,none": acc, "acc_stderr,none": 0.1}}}


def test_agreement_counts_greedy_and_the_largest_delta():
    hf = results([[(-1.0, True), (-2.0, False)], [(-3.0, False)]], 0.5)
    ours = results([[(-1.00002, True), (-2.0, True)], [(-3.5, False)]], 0.5)
    a = agreement(hf, ours, "t")
    assert a["requests"] == 3 and a["is_greedy_identical"] == "2/3"
    assert a["max_abs_delta"] == pytest.approx(0.5)
    assert a["metrics_identical"] and list(a["metrics"]) == ["acc,none"]
    assert not agreement(hf, results([[(-1.0, True), (-2.0, False)], [(-3.0, False)]], 1.0), "t")["metrics_identical"]


def test_agreement_checks_each_request_against_the_fp32_bound():
    hf = results([[(-1.0, True), (-2.0, False)]], 0.5)
    hf["samples"]["t"][0]["arguments"] = [("a b c", " d"), ("a b c", " e f")]  # 4 and 5 tokens: bounds 1.4e-4, 1.5e-4
    ours = results([[(-1.00013, True), (-2.0003, False)]], 0.5)
    a = agreement(hf, ours, "t", count=lambda text: len(text.split()))
    assert a["within_fp32_bound"] == "1/2" and a["largest_delta_over_bound"] == pytest.approx(2.0, rel=1e-3)
    assert "within_fp32_bound" not in agreement(hf, ours, "t")


def test_report_names_every_method_and_speedup():
    seconds = {"first": 2.0, "median": 2.0, "q1": 1.5, "q3": 2.5}
    a = {
        "requests": 3,
        "max_abs_delta": 1e-6,
        "is_greedy_identical": "3/3",
        "metrics_identical": True,
        "metrics": {"acc,none": {"hf": 0.5, "jetgym": 0.5}},
    }
    r = {
        "command": "python -m benchmarks.lm_eval",
        "cpus": 2,
        "threads": 2,
        "model": "m",
        "hf_batch_size": 8,
        "max_batch_tokens": 1024,
        "rounds": 1,
        "dtypes": ["float32", "bfloat16"],
        "workloads": {
            "w": {
                "task": "t",
                "num_fewshot": 5,
                "limit": 20,
                "documents": 20,
                "agreement": {"float32": a, "bfloat16": a},
                "seconds": {
                    "jetgym_float32": seconds,
                    "hf_bs8_float32": seconds,
                    "speedup_float32": {"median": 1.0, "first": 1.0},
                    "speedup_bfloat16": {"median": 3.0, "first": 2.5},
                },
            }
        },
    }
    text = render(r)
    assert "| jetgym_float32 | 2.0 [1.5, 2.5] | 2.0 |" in text and "5-shot, first 20 documents" in text
    assert "bfloat16: hf / jetgym = **3.00x** (first pass 2.50x)" in text
    r["workloads"]["w"]["agreement"]["float32"] = {**a, "within_fp32_bound": "3/3", "largest_delta_over_bound": 0.25}
    assert "(within 1e-4 + 1e-5 per request token: 3/3, largest |delta| / bound 0.25)" in render(r)


def test_rounds_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
