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
        wrong = row["planned_wrong"]
        assert sum(wrong.values()) <= row["planned"]["labels"]
        view = row["in_view"]
        assert view["labels"] <= row["cloned"]["labels"] and view["situations"] <= max(view["labels"], 1)
    last = rounds[-1]["cloned"]
    assert last["labels"] > 0 and last["right"] > last["chance"]  # better than chance
    assert "| round | env steps |" in (tmp_path / "rft-labels.md").read_text()


def test_situations_group_labels_by_where_the_named_object_is():
    from types import SimpleNamespace

    from benchmarks.labels import by_situation, situation
    from jetgym.scorers import Question
    from jetgym.training.plan import state_key

    assert situation("Mission: x.\nNamed in the mission: the red ball 12 steps ahead and 1 to the left.") == (
        "N steps ahead and 1 to the left"
    )
    assert (
        situation("Named in the mission: the key 1 step to the right; the box, not in view.") == "1 step to the right"
    )
    assert situation("Named in the mission: the red ball, not in view.") == "not in view"
    assert situation("You see nothing but empty floor.") == ""

    def item(place: str, gold: int):
        context = f"Named in the mission: the red ball {place}.\nYou see: a wall {gold + 10 * len(place)} steps ahead."
        return SimpleNamespace(decision=Question(context=context, candidates=("left", "right", "forward"), gold=gold))

    left = "2 steps to the left"
    items = [item(left, 0), item(left, 0), item(left, 1), item("3 steps to the left", 2), item(", not in view", 0)]
    right = {state_key(k.decision): [frozenset({0})] for k in items}  # turning left is right everywhere
    scores = by_situation(items, right)
    # the not-in-view label is left out; 'N steps to the left' holds four labels, two of them right; its majority
    # (turn left, two of four) is right for all four
    assert scores == {"labels": 4, "situations": 1, "right": 0.5, "majority_right": 1.0}
    tied = by_situation(items[2:4], right)  # one label each of 1 and 2: the tie goes to the lower action, 1
    assert tied["majority_right"] == 0.0


def test_bad_steps_are_refused(capsys):
    from benchmarks import labels

    with pytest.raises(SystemExit):
        labels.main(["--env-steps", "0"])
    assert "--env-steps must be >= 1, got 0" in capsys.readouterr().err
