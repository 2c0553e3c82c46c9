"""The stable-baselines3 reference benchmark runs end to end on a tiny budget and writes strict JSON."""

from __future__ import annotations

import json

import pytest

from jetgym.scripts import bench_sb3


def test_sb3_reference_trains_and_evaluates(tmp_path, capsys):
    bench_sb3.main(["--budgets", "64", "--seeds", "1", "--episodes", "2", "--envs", "frozenlake-still", "taxi",
                    "--output-dir", str(tmp_path)])
    results = json.loads((tmp_path / "train_sb3.json").read_text())
    assert [(r["env"], r["env_steps"], len(r["success"])) for r in results["runs"]] == [("frozenlake-still", 64, 2),
                                                                                      ("taxi", 64, 2)]
    assert all(s in (0.0, 1.0) for r in results["runs"] for s in r["success"])
    assert "| Taxi-v4  | 64 |" in capsys.readouterr().out


def test_sb3_reference_refuses_a_zero_budget(capsys):
    with pytest.raises(SystemExit):
        bench_sb3.main(["--budgets", "0"])
    assert "every --budgets value must be >= 1" in capsys.readouterr().err
