"""The MiniGrid benchmark's mechanics with the fake scorer: rounds over every env, paired seeds, the report."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("minigrid")


def test_rounds_cover_every_env_and_pair_the_seeds(tmp_path, monkeypatch, fake_scorer):
    import jetgym.scorers
    from benchmarks import minigrid as bench_minigrid

    real = jetgym.scorers.make_scorer
    monkeypatch.setattr(jetgym.scorers, "make_scorer", lambda name, **options: real("fake", **options))
    results = bench_minigrid.bench(
        ["minigrid_empty_5x5", "babyai_goto_obj"], episodes=3, seed=50, num_envs=2, output_dir=str(tmp_path)
    )
    games = {(g["env"], g["agent"]): g for g in results["games"]}
    assert set(games) == {(e, a) for e in ("minigrid_empty_5x5", "babyai_goto_obj") for a in ("random", "scorer")}
    for game in games.values():
        assert game["seeds"] == [50, 51, 52] and len(game["successes"]) == 3
        assert all(s == float(r > 0) for s, r in zip(game["successes"], game["returns"]))
    saved = json.loads((tmp_path / "minigrid.json").read_text())
    assert saved["games"] == json.loads(json.dumps(results["games"]))
    report = (tmp_path / "minigrid.md").read_text()
    assert "| minigrid:MiniGrid-Empty-5x5-v0 | scorer | 3 |" in report and "Not finished" not in report


def test_a_partial_run_says_what_is_missing():
    from benchmarks.minigrid import render

    game = {
        "env": "minigrid_empty_5x5",
        "id": "minigrid:MiniGrid-Empty-5x5-v0",
        "agent": "random",
        "episodes": 2,
        "seeds": [0, 1],
        "returns": [0.0, 0.5],
        "successes": [0.0, 1.0],
        "lengths": [100, 40],
        "decisions": 140,
        "decisions_per_second": None,
        "wall_seconds": 0.1,
    }
    text = render(
        {
            "games": [game],
            "episodes": 4,
            "seed": 0,
            "num_envs": 2,
            "envs": ["minigrid_empty_5x5"],
            "machine": "cpu",
            "dtype": None,
            "wall_seconds": 1.0,
        }
    )
    assert "scorer on minigrid_empty_5x5: not started" in text and "minigrid_empty_5x5 (2 of 4) episodes" in text
