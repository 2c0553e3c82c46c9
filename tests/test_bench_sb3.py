"""The stable-baselines3 reference benchmark runs end to end on a tiny budget and writes strict JSON."""

from __future__ import annotations

import json

import pytest

from benchmarks import sb3 as bench_sb3


def test_sb3_reference_trains_and_evaluates(tmp_path, capsys):
    bench_sb3.main(
        [
            "--budgets",
            "64",
            "--seeds",
            "1",
            "--episodes",
            "2",
            "--envs",
            "frozenlake-still",
            "taxi",
            "--output-dir",
            str(tmp_path),
        ]
    )
    results = json.loads((tmp_path / "train_sb3.json").read_text())
    assert [(r["env"], r["env_steps"], len(r["success"])) for r in results["runs"]] == [
        ("frozenlake-still", 64, 2),
        ("taxi", 64, 2),
    ]
    assert all(s in (0.0, 1.0) for r in results["runs"] for s in r["success"])
    assert "| Taxi-v4  | 64 |" in capsys.readouterr().out


def test_sb3_reference_refuses_a_zero_budget(capsys):
    with pytest.raises(SystemExit):
        bench_sb3.main(["--budgets", "0"])
    assert "every --budgets value must be >= 1" in capsys.readouterr().err


def test_sb3_report_is_rebuilt_from_stored_results(tmp_path, capsys):
    """Mean over training and held-out seeds; the interval resamples held-out seeds, pairing the training seeds."""
    runs = [
        {"env": "taxi", "env_steps": 8, "seed": seed, "success": wins, "train_seconds": 1.0}
        for seed, wins in ((0, [1.0, 0.0, 0.0, 1.0]), (1, [1.0, 1.0, 0.0, 0.0]))
    ]
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps({"machine": "x", "threads": 2, "runs": runs}))
    bench_sb3.main(["--from-results", str(stored), "--output-dir", str(tmp_path / "out")])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| Taxi-v4"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[:3] == ["Taxi-v4", "8", "0.50, 0.50"] and cells[3].startswith("0.50 [")
    low, high = map(float, cells[3][len("0.50 [") : -1].split(", "))
    assert 0.0 <= low < 0.5 < high <= 1.0  # held-out seed 0 always wins, 2 never: the mean moves when resampled
    assert json.loads((tmp_path / "out" / "train_sb3.json").read_text())["runs"] == runs
