"""Planning on what was played (`train.advantage=plan`): value iteration on the transitions of every episode so
far, checked by hand on small graphs and against Taxi's exact optimal values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from jetgym.scorers import Question
from jetgym.training.plan import Transitions, state_key


def at(room: str, gold: int) -> Question:
    return Question(context=f"at {room}", candidates=["x", "y"], gold=gold)


def contexts(labels) -> list[tuple[str, int]]:
    return sorted((label.decision.context, label.decision.gold) for label in labels)


def test_values_stitch_routes_that_no_single_episode_played():
    transitions = Transitions()
    transitions.add([at("S", 0), at("M", 1)], [0, 0], terminated=True)  # S -x-> M -y-> a dead end
    transitions.add([at("S", 1), at("X", 0)], [0, 0], terminated=True)  # S -y-> X -x-> a dead end
    transitions.add([at("M", 0)], [1], terminated=True)  # M -x-> the goal, in an episode that began at M
    values = {q.decision.context: q.value for q in transitions.labels(0.9)}
    assert contexts(transitions.labels(0.9)) == [("at M", 0), ("at S", 0)]  # S: x, towards M, though no S episode won
    assert values == pytest.approx({"at M": 1.0, "at S": 0.9})


def test_a_loop_is_worth_less_than_the_way_out_and_a_cut_last_step_is_left_out():
    transitions = Transitions()
    transitions.add([at("A", 1), at("A", 1), at("A", 0), at("B", 0)], [-1, -1, -1, 5], terminated=True)
    transitions.add([at("B", 1), at("C", 0)], [-1, 9], terminated=False)  # cut: C's step has no known next state
    values = transitions.values(0.5)
    assert set(values) == {state_key(at("A", 0)), state_key(at("B", 0))}  # C was never left: not a state here
    # B: x pays 5 (then the end), y pays -1 (its next state, C, counts 0); A: x leads to B: -1 + 0.5 * 5 = 1.5,
    # y loops at A: -1 + 0.5 * 1.5 = -0.25
    assert values[state_key(at("B", 0))] == pytest.approx({0: 5.0, 1: -1.0})
    assert values[state_key(at("A", 0))] == pytest.approx({0: 1.5, 1: -0.25})
    assert contexts(transitions.labels(0.5)) == [("at A", 0), ("at B", 0)]


def test_a_stochastic_action_is_worth_the_mean_of_where_it_led():
    transitions = Transitions()
    for outcome in (1, 0, 1, 1):  # y reaches the goal 3 times in 4; x always pays 0.5
        transitions.add([at("A", 1)], [outcome], terminated=True)
    transitions.add([at("A", 0)], [0.5], terminated=True)
    (label,) = transitions.labels(0.9)
    assert (label.decision.gold, label.value, label.advantage) == (1, pytest.approx(0.75), pytest.approx(0.125))
    transitions.add([at("B", 0)], [1], terminated=True)
    transitions.add([at("B", 1)], [1], terminated=True)
    assert contexts(transitions.labels(0.9)) == [("at A", 1)]  # B's actions are worth the same: no label


def test_transitions_come_back_from_their_rows():
    transitions = Transitions()
    transitions.add([at("S", 0), at("M", 1)], [0, 0], terminated=True)
    transitions.add([at("S", 1), at("M", 0)], [0, 1], terminated=True)
    again = Transitions(transitions.rows())
    assert again.rows() == transitions.rows()
    assert [(label.decision, label.value) for label in again.labels(0.9)] == [
        (label.decision, label.value) for label in transitions.labels(0.9)
    ]


def test_random_play_on_taxi_plans_the_optimal_actions():
    """12,000 steps of uniform random play (no model): every planned label is an optimal action of Taxi-v4 under
    its exact values (value iteration on the env's own transition table), and most states get one."""
    gamma, env = 0.95, gym.make("Taxi-v4")
    table = env.unwrapped.P
    value = np.zeros(500)
    for _ in range(400):
        q = np.array(
            [
                [sum(p * (r + gamma * value[n] * (not done)) for p, n, r, done in table[s][a]) for a in range(6)]
                for s in range(500)
            ]
        )
        value = q.max(axis=1)
    rng, transitions, steps, seed = np.random.default_rng(0), Transitions(), 0, 0
    while steps < 12_000:
        observation, info = env.reset(seed=seed)
        seed += 1
        decisions, rewards, terminated, truncated = [], [], False, False
        while not (terminated or truncated):
            actions = np.flatnonzero(info["action_mask"])
            pick = int(rng.integers(len(actions)))
            decisions.append(Question(context=f"state {observation}", candidates=[f"a{a}" for a in actions], gold=pick))
            observation, reward, terminated, truncated, info = env.step(int(actions[pick]))
            rewards.append(float(reward))
        transitions.add(decisions, rewards, terminated)
        steps += len(rewards)
    labels = transitions.labels(gamma)
    picked = [
        (int(label.decision.context.split()[1]), int(label.decision.candidates[label.decision.gold][1:]))
        for label in labels
    ]
    optimal = [q[s, a] >= q[s].max() - 1e-6 for s, a in picked]
    assert len(labels) > 200 and sum(optimal) >= 0.98 * len(labels), (len(labels), sum(optimal))


def test_the_explorer_tries_what_was_never_played_and_heads_for_the_nearest_such_state():
    transitions = Transitions()
    assert transitions.explorer(0.9) == {}  # nothing played: any action will do
    transitions.add([at("S", 0), at("M", 0)], [0, 0], terminated=True)  # S -x-> M -x-> the end
    explorer = transitions.explorer(0.9)
    assert explorer[state_key(at("S", 0))] == [1] and explorer[state_key(at("M", 0))] == [1]  # y: never played
    transitions.add([at("S", 1)], [0], terminated=True)  # S's y ends at once; M's y is still untried
    assert transitions.explorer(0.9)[state_key(at("S", 0))] == [0]  # towards M and its untried action
    transitions.add([at("M", 1)], [0], terminated=True)
    assert transitions.explorer(0.9)[state_key(at("S", 0))] == [0, 1]  # all played, all worth 0: either


def play_tabular(env, transitions, rounds_steps: int, explore: bool, seed: int = 0) -> int:
    """Rounds of 8 seeds x 4 episodes with no model: episode m draws uniformly with weight 1 - m/3 and, with weight
    m/3, from the explorer's actions (uniformly from all when `explore` is off); returns the episodes that won."""
    rng, steps, won, round_ = np.random.default_rng(seed), 0, 0, 0
    n = env.action_space.n
    while steps < rounds_steps:
        explorer = transitions.explorer(0.95) if explore else {}
        played = []
        for member in [m for _ in range(8) for m in range(4)]:
            observation, _ = env.reset(seed=1000 * round_ + len(played) // 4)
            decisions, rewards, terminated, truncated = [], [], False, False
            while not (terminated or truncated):
                question = Question(context=f"state {observation}", candidates=[str(a) for a in range(n)])
                towards = explorer.get(state_key(question), list(range(n)))
                p = (1 - member / 3) * np.ones(n) / n
                p[towards] += member / 3 / len(towards)
                action = int(rng.choice(n, p=p / p.sum()))
                decisions.append(Question(context=question.context, candidates=question.candidates, gold=action))
                observation, reward, terminated, truncated, _ = env.step(action)
                rewards.append(float(reward))
            played.append((decisions, rewards, terminated))
            won += rewards[-1] > 0
            steps += len(rewards)
        for episode in played:
            transitions.add(*episode)
        round_ += 1
    return won


def test_the_explorer_finds_a_goal_that_uniform_play_misses():
    """FrozenLake 8x8 without slides: no reward but at the goal, 200-step episodes. 8,000 steps of uniform play
    never reach it; the explorer's (no model either way) do, and then every state on the way gets a label."""

    def env():
        return gym.make("FrozenLake-v1", map_name="8x8", is_slippery=False, max_episode_steps=200)

    uniform, explored = Transitions(), Transitions()
    assert play_tabular(env(), uniform, 8000, explore=False) == 0 and uniform.labels(0.95) == []
    assert play_tabular(env(), explored, 8000, explore=True) > 0
    assert len(explored.labels(0.95)) > 40


def test_equally_good_actions_are_the_labels_ties_and_the_clone_may_take_any():
    """Two of three actions reach the goal at once: the label is the lowest of them, the other its tie, and
    cloning scores the pair together (the loss is -log of their summed probability; the argmax agrees on either)."""
    import torch

    from jetgym.training.rft import Kept
    from jetgym.training.sft import gold_nll

    def three(gold: int) -> Question:
        return Question(context="at A", candidates=["x", "y", "z"], gold=gold)

    transitions = Transitions()
    for action, reward in ((2, 1), (1, 0), (0, 1)):
        transitions.add([three(action)], [reward], terminated=True)
    (label,) = transitions.labels(0.9)
    assert (label.decision.gold, label.ties, label.value) == (0, (2,), pytest.approx(1.0))
    kept = Kept(label.decision, label.value, 0, ties=label.ties)
    assert kept.accepted() == [0, 2]
    log_q = torch.log_softmax(torch.tensor([0.5, 2.0, -1.0]), dim=0)
    (nll,) = gold_nll([log_q], [kept.decision], [kept.accepted()]).tolist()
    assert nll == pytest.approx(-float(torch.log(log_q.exp()[0] + log_q.exp()[2])), rel=1e-6)
    (alone,) = gold_nll([log_q], [kept.decision]).tolist()  # without the ties: the gold's text only
    assert alone == pytest.approx(-float(log_q[0]), rel=1e-6)
