"""The label benchmark's oracle and rounds: following right actions reaches the named object, and every round's
labels are scored against it."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid")


def test_right_actions_reach_a_named_object_along_a_shortest_route():
    import jetgym.envs  # noqa: F401
    from benchmarks.labels import right_actions

    env = gym.make("jetgym/BabyAI-GoToLocalTrain-v0")
    for seed in range(5):
        env.reset(seed=seed)
        before = right_actions(env)
        assert before and before <= {0, 1, 2}
        rng = np.random.default_rng(seed)
        for _ in range(64):
            _, reward, terminated, _, _ = env.step(int(rng.choice(sorted(right_actions(env)))))
            if terminated:
                break
        assert terminated and reward > 0, f"seed {seed}: the right actions did not reach the object"
        assert right_actions(env) == frozenset()  # facing it: nothing left to shorten
        env.reset(seed=seed)  # a wrong first step still leaves a route, and a right one from there
        wrong = sorted({0, 1, 2} - before)
        if wrong:
            env.step(wrong[0])
            assert right_actions(env), "a wrong step must leave a route"
    env.close()


def test_rounds_score_every_kind_of_label(tmp_path):
    from benchmarks import labels

    labels.main(["--env-steps", "600", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "rft-labels.json").read_text())
    rounds = saved["rounds"]
    assert rounds[-1]["env_steps"] == 600 and [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))
    for row in rounds:
        for kind in ("planned", "pool", "cloned"):
            score = row[kind]
            if score["labels"] == 0:
                assert score["right"] is None and score["chance"] is None
            else:
                assert 0 <= score["right"] <= 1 and 0 < score["chance"] < 1
    last = rounds[-1]["cloned"]
    assert last["labels"] > 0 and last["right"] > last["chance"]  # better than chance
    assert "| round | env steps |" in (tmp_path / "rft-labels.md").read_text()


def test_bad_steps_are_refused(capsys):
    from benchmarks import labels

    with pytest.raises(SystemExit):
        labels.main(["--env-steps", "0"])
    assert "--env-steps must be >= 1, got 0" in capsys.readouterr().err
