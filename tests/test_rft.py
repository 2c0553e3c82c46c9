"""Learning from reward: memoized rollouts give the adapter of unmemoized ones, aggregated updates the loss and
gradient of plain ones, `rft` learns the rewarded action (a tiny env, and a text env whose words mislead the
embedded model), resumes after `kill -9`, and refuses bad inputs naming the field."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace

import gymnasium as gym
import pytest
import torch
from safetensors.torch import load_file

from jetgym.agents import make_agent
from jetgym.envs.candidates import CandidateActions
from jetgym.scorers import Question, make_scorer
from jetgym.training import rft
from jetgym.training.data_parallel import Shards
from jetgym.training.evaluation import question_digest
from jetgym.training.options import LoraOptions, PPOOptions, RFTOptions, SFTOptions
from jetgym.training.policy import Policy
from jetgym.training.run import run_ppo, run_rft
from jetgym.training.sft import fit_step

from test_training import Bandit, p_east, tiny_scorer

TESTS = os.path.dirname(__file__)


def bandit_run(num_envs=2, **policy_options):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0, **policy_options)
    envs = [CandidateActions(Bandit(), texts=["go west", "go east"]) for _ in range(num_envs)]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    return policy, envs, agent


def rows_of(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]


def test_memoized_rollouts_train_exactly_the_unmemoized_adapter(tmp_path):
    states = {}
    for memoize in (True, False):
        policy, envs, agent = bandit_run(memoize=memoize)
        run_ppo(
            policy,
            envs,
            agent,
            PPOOptions(num_envs=2, rollout_steps=4, minibatch=4, learning_rate=0.01),
            tmp_path / str(memoize),
            env_steps=24,
            seed=3,
            progress=False,
        )
        states[memoize] = policy.state()
    assert states[True].keys() == states[False].keys()
    assert all(torch.equal(states[True][k], states[False][k]) for k in states[True])
    memoized, plain = rows_of(tmp_path / "True"), rows_of(tmp_path / "False")
    # one state, so each update's rollout scores its first question and reads the other 7 from the memo
    assert [(r["scored"], r["cached"]) for r in memoized] == [(1, 7)] * 3
    assert all("scored" not in r for r in plain)


def test_aggregated_questions_give_the_plain_loss_and_gradient():
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    with torch.no_grad():  # peft starts lora_B at 0: move it, so every parameter has a gradient
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.05 * torch.randn_like(parameter))
    a = Question(context="Choose.", candidates=["go west", "go east"])
    b = Question(context="Pick one.", candidates=["red", "blue", "green"])
    questions, actions = [a, b, a, a, b], [1, 0, 0, 1, 2]
    results = {}
    for aggregate in (True, False):
        policy.aggregate = aggregate
        policy.model.zero_grad(set_to_none=True)
        policy.value_head.zero_grad(set_to_none=True)
        evaluated = policy.evaluate(questions)
        loss = -sum(lq[k] for lq, k in zip(evaluated.log_q, actions)) + (evaluated.values**2).sum()
        loss.backward()
        results[aggregate] = (
            float(loss.detach()),
            {k: p.grad.clone() for k, p in enumerate(policy.parameters()) if p.grad is not None},
        )
    (loss_a, grads_a), (loss_p, grads_p) = results[True], results[False]
    assert loss_a == pytest.approx(loss_p, abs=1e-5)
    assert grads_a.keys() == grads_p.keys() and len(grads_a) > 2
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_p[name], atol=1e-5), name


def test_aggregated_ppo_terms_give_the_plain_loss_and_gradient():
    """The clipped ratio, value, entropy and KL terms of a minibatch with repeated (question, action) samples."""
    from jetgym.training.ppo import Step, _minibatch_terms

    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    a = Question(context="Choose.", candidates=["go west", "go east"])
    b = Question(context="Pick one.", candidates=["red", "blue", "green"])
    flat = [Step(q, k, -0.7, 0.0, False, False) for q, k in ((a, 1), (b, 0), (a, 1), (a, 0), (b, 0), (a, 1))]
    adv, ret = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8, 0.1]), torch.tensor([0.5, 0.1, 0.2, -0.3, 0.0, 0.4])
    old = torch.tensor([s.logprob for s in flat])
    options = PPOOptions(clip=0.1)
    results = {}
    for aggregate in (True, False):
        policy.aggregate = aggregate
        for parameter in policy.parameters():
            parameter.grad = None
        terms = _minibatch_terms(policy, flat, list(range(len(flat))), adv, ret, old, options, autocast=False)
        loss = terms["policy_loss"] + 0.5 * terms["value_loss"] - 0.01 * terms["entropy"]
        loss.backward()
        results[aggregate] = (
            {k: float(v.detach()) for k, v in terms.items()},
            [p.grad.clone() for p in policy.parameters() if p.grad is not None],
        )
    (terms_a, grads_a), (terms_p, grads_p) = results[True], results[False]
    assert terms_a == pytest.approx(terms_p, abs=1e-5)
    assert len(grads_a) == len(grads_p) > 2
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(grads_a, grads_p))


def test_a_round_reports_its_steps_as_they_are_played_and_stops_at_the_budget():
    policy, envs, agent = bandit_run()
    options = RFTOptions(group=2, seeds_per_round=3, num_envs=2)
    reported = []
    played = rft.play_round(envs, agent, policy.scorer, [1, 2, 3], options, 1.0, 0, budget=5, on_steps=reported.append)
    assert sum(len(e.rewards) for e in played) == sum(reported) == 5
    assert reported == [2, 2, 1]  # one call per batch of decisions (two envs), the last cut by the budget


def test_episodes_cut_by_the_budget_are_marked_and_the_round_row_leaves_them_out(tmp_path):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    envs = [CandidateActions(gym.wrappers.TimeLimit(MisleadingRooms(), 6)) for _ in range(2)]
    agent = make_agent("scorer", scorer=policy.scorer, task="Find.", describer=lambda o: str(o), policy="sample")
    options = RFTOptions(group=2, seeds_per_round=2, num_envs=2)
    played = rft.play_round(envs, agent, policy.scorer, [1, 2], options, 1.0, 0, budget=9)
    assert sum(len(e.rewards) for e in played) == 9
    assert all(e.ended == (len(e.rewards) == 6 or e.rewards[-1] == 1) for e in played)
    assert any(not e.ended for e in played)
    run_rft(policy, envs, agent, options, tmp_path, env_steps=9, progress=False)
    (row,) = rows_of(tmp_path)
    assert row["cut_episodes"] >= 1
    ended = row["episodes"] - row["cut_episodes"]  # the clone's 32-step floor shrinks to the share that ended
    taken = row["fresh_decisions"] + row["replayed_decisions"]  # this one round is the last: train.tries (2) caps
    assert row["clone_steps"] <= 2 * max(math.ceil(32 * ended / 4), 1, math.ceil(taken / 8))
    if row["cut_episodes"] == row["episodes"]:  # nothing ended: no return or success to report, not 0
        assert row["mean_return"] is row["success_rate"] is row["best_return"] is None


def test_keep_rules_select_within_each_group():
    def group(seed, returns, successes=None):
        return [
            rft.Played(seed, m, rewards=[r], success=bool(successes and successes[m]), ended=True)
            for m, r in enumerate(returns)
        ]

    assert rft.keep_group(group(0, [1, 1, 1, 1], [1, 1, 1, 1]), "auto") == []  # one return: nothing to learn
    mixed = group(0, [0, 1, 0, 1], [0, 1, 0, 1])
    assert [e.member for e in rft.keep_group(mixed, "auto")] == [1, 3]
    assert [e.member for e in rft.keep_group(mixed, "success")] == [1, 3]
    graded = group(1, [-5, -1, -3, -2])  # no success anywhere: auto keeps the top quarter by return
    assert [e.member for e in rft.keep_group(graded, "auto")] == [1]
    assert [e.member for e in rft.keep_group(graded, "top:0.5")] == [1, 3]
    assert [e.member for e in rft.keep_group(graded, "top:1")] == [1, 2, 3]  # never the group's worst
    assert rft.keep_group(graded, "success") == []
    assert [(e.seed, e.member) for e in rft.kept_episodes(mixed + graded, "auto")] == [(0, 1), (0, 3), (1, 1)]
    cut = rft.Played(1, 4, rewards=[0])  # the budget cut it after one step: its return is not comparable
    assert [(e.seed, e.member) for e in rft.kept_episodes(graded + [cut], "auto")] == [(1, 1)]


def test_auto_keeps_by_return_where_reward_comes_along_the_way():
    """A last step that earns is no goal where earlier steps earn too: the return ranks the episodes, unless the
    env reports success itself."""
    walks = [[1, 1, 1, 0], [0, 0, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]]  # returns 3, 1, 2, 2
    group = [rft.Played(0, m, rewards=r, success=r[-1] > 0, ended=True) for m, r in enumerate(walks)]
    assert not rft.success_is_the_goal(group)
    assert [e.member for e in rft.keep_group(group, "auto")] == [0]
    assert [e.member for e in rft.keep_group(group, "success")] == [1, 3]
    for episode in group:
        episode.reported = True
    assert [e.member for e in rft.keep_group(group, "auto")] == [1, 3]
    sparse = [rft.Played(1, m, rewards=[-1, -1, r], success=r > 0, ended=True) for m, r in enumerate([20, -1, 20, -1])]
    assert rft.success_is_the_goal(sparse)  # Taxi-like: only the delivery earns
    assert [e.member for e in rft.keep_group(sparse, "auto")] == [0, 2]


def test_the_pool_keeps_one_action_per_question_the_one_with_the_best_continuation():
    def at(room, gold):
        return Question(context=f"at {room}", candidates=["x", "y"], gold=gold)

    kept = rft.loop_erased(rft.Played(0, 0, decisions=[at("A", 0), at("B", 1), at("A", 1)], rewards=[0, 0, 1]))
    assert [(k.decision.context, k.decision.gold, k.return_to_go, k.steps_to_go) for k in kept] == [
        ("at B", 1, 1.0, 2),
        ("at A", 1, 1.0, 1),
    ]  # A's first visit led back to A: its last action is kept
    pool = rft.Pool(3)
    assert pool.add(kept) == 2
    longer = rft.loop_erased(rft.Played(1, 0, decisions=[at("A", 0), at("C", 0), at("B", 0)], rewards=[0, 0, 1]))
    assert pool.add(longer) == 1  # C is new; A (3 steps to go, not 1) keeps its action, B (1 step, not 2) takes 0
    assert [(k.decision.context, k.decision.gold) for k in pool.kept()] == [("at A", 1), ("at C", 0), ("at B", 0)]
    assert pool.add([rft.Kept(at("D", 1), 0.0, 1)]) == 1
    assert [k.decision.context for k in pool.kept()] == ["at C", "at B", "at D"]  # the least recently kept left
    assert rft.Pool(3, pool.rows()).rows() == pool.rows()


def test_a_planned_label_is_trusted_where_every_action_was_played_or_a_kept_episode_passed():
    """Q was played with two of its three actions, in episodes that failed: the better of the two may not be its
    best, so the pool decides there (it has nothing); once the third is played, the plan labels Q."""
    from jetgym.training.plan import Transitions

    def at(room, gold):
        return Question(context=f"at {room}", candidates=["x", "y", "z"], gold=gold)

    def episode(member, *steps, success=False):
        decisions = [at(room, gold) for room, gold in steps]
        rewards = [0.0] * (len(steps) - 1) + [float(success)]
        return rft.Played(0, member, decisions, rewards, success=success, terminated=True, ended=True)

    pool, transitions, options = rft.Pool(8), Transitions(), RFTOptions()
    first = [episode(0, ("A", 0), success=True), episode(1, ("Q", 1), ("A", 1)), episode(2, ("Q", 0), ("R", 0))]
    labelled = rft.label_round(first, pool, transitions, options)
    assert [(k.decision.context, k.decision.gold) for k in labelled.planned] == [("at A", 0)]  # A: a kept episode
    assert [(k.decision.context, k.decision.gold) for k in labelled.cloned] == [("at A", 0)]
    labelled = rft.label_round([episode(0, ("Q", 2), ("R", 0))], pool, transitions, options)
    assert sorted((k.decision.context, k.decision.gold) for k in labelled.planned) == [("at A", 0), ("at Q", 1)]


def test_step_groups_keep_the_action_of_best_mean_return_at_each_recurring_question():
    def at(room, gold):
        return Question(context=f"at {room}", candidates=["x", "y"], gold=gold)

    played = [
        rft.Played(0, 0, decisions=[at("A", 0), at("B", 1)], rewards=[0, 1]),
        rft.Played(0, 1, decisions=[at("A", 1), at("B", 0)], rewards=[0, 0]),
        rft.Played(1, 0, decisions=[at("A", 0), at("C", 0)], rewards=[1, 0]),
    ]
    kept = rft.step_groups(played)  # A: action 0 (mean 1) beats A's mean 2/3; B: 1 beats 0; C: one action only
    assert [(k.decision.context, k.decision.gold, k.return_to_go, k.steps_to_go) for k in kept] == [
        ("at A", 0, 1.0, 2),
        ("at B", 1, 1.0, 1),
    ]
    # weight: the advantage over the spread of the round's returns to go (1, 1, 0, 0, 1, 0: 0.5), at most 1
    assert [k.weight for k in kept] == [pytest.approx((1 - 2 / 3) / 0.5), 1.0]
    assert (
        rft.step_groups(
            [
                rft.Played(0, 0, decisions=[at("D", 0)], rewards=[0]),
                rft.Played(0, 1, decisions=[at("D", 1)], rewards=[0]),
            ]
        )
        == []
    )  # no action is better


def test_discounted_returns_to_go_weigh_what_follows_soon():
    assert rft.returns_to_go([1, 0, 2]) == [3, 2, 2]
    assert rft.returns_to_go([1, 0, 2], gamma=0.5) == [1.5, 1.0, 2.0]

    # a time limit cuts two walks: undiscounted, the later visit of A looks better only for the steps left
    def at(room, gold):
        return Question(context=f"at {room}", candidates=["x", "y"], gold=gold)

    early = rft.Played(0, 0, decisions=[at("A", 0)] + [at("B", 0)] * 19, rewards=[-1] * 20)
    late = rft.Played(0, 1, decisions=[at("B", 1)] * 10 + [at("A", 1)] + [at("B", 1)] * 9, rewards=[-1] * 20)

    def weight_of_a(gamma):
        ((gold, weight),) = [
            (k.decision.gold, k.weight) for k in rft.step_groups([early, late], gamma) if k.decision.context == "at A"
        ]
        return gold, weight

    assert weight_of_a(1.0)[0] == 1 and weight_of_a(1.0)[1] > 0.5  # -10 beats -20 by the steps left
    assert weight_of_a(0.5)[0] == 1 and weight_of_a(0.5)[1] < 0.05  # discounted, both are about -2


def test_weighted_cloning_scales_each_questions_loss_and_gradient():
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.02)
    first = Question(context="Choose. here", candidates=["go west", "go east"], gold=1)
    second = Question(context="Choose. there", candidates=["go west", "go east"], gold=0)

    def step(questions, weights):
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
        no_clipping = SFTOptions(max_grad_norm=1e9)
        loss = fit_step(policy, optimizer, questions, no_clipping, weights=weights).loss
        return loss, [p.grad.clone() for p in policy.parameters() if p.grad is not None]

    loss_1, grad_1 = step([first, second], [1.0, 0.0])
    loss_half, grad_half = step([first], None)
    assert loss_1 == pytest.approx(loss_half / 2, rel=1e-5)  # the weight-0 question adds nothing, the mean halves
    assert all(torch.allclose(a * 2, b, atol=1e-6) for a, b in zip(grad_1, grad_half))


@pytest.mark.parametrize(
    "advantage, counts",
    [("step-group", ("step_group_decisions", 1, "pool", 1)), ("plan", ("planned_decisions", 1, "pool", 0))],
)
def test_step_level_advantages_learn_where_no_episode_is_kept(tmp_path, advantage, counts):
    """Penalty has no success, so keep=success keeps no episode; its one state compares the two actions (in the
    round's episodes with step-group, in every transition played with plan)."""
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    envs = [CandidateActions(Penalty(), texts=["go west", "go east"]) for _ in range(2)]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    before = p_east(policy)
    options = RFTOptions(
        group=4,
        seeds_per_round=2,
        num_envs=2,
        updates=4,
        minibatch=4,
        learning_rate=0.02,
        keep="success",
        advantage=advantage,
    )
    summary = run_rft(policy, envs, agent, options, tmp_path, env_steps=48, progress=False)
    assert p_east(policy) > 0.5 > before, (before, p_east(policy))  # cloned until its argmax is east
    assert rows_of(tmp_path)[-1]["clone_agreement"] == 1.0
    assert summary["kept_episodes"] == 0
    first, last = rows_of(tmp_path)[0], rows_of(tmp_path)[-1]
    assert (counts[0], first[counts[0]], counts[2], last[counts[2]]) == counts and last["cloned"] == 1


def test_rft_learns_the_rewarded_action(tmp_path):
    policy, envs, agent = bandit_run()
    before = p_east(policy)
    options = RFTOptions(group=4, seeds_per_round=2, num_envs=2, updates=4, minibatch=4, learning_rate=0.02)
    summary = run_rft(
        policy, envs, agent, options, tmp_path, env_steps=46, progress=False
    )  # the last round cut at 6 of its 8 steps
    after = p_east(policy)
    assert after > 0.5 > before, (before, after)  # cloned until its argmax is east, then no further
    rows = rows_of(tmp_path)
    assert [r["round"] for r in rows] == list(range(1, 7)) and summary["rounds"] == 6 and summary["env_steps"] == 46
    assert all(r["kept_episodes"] >= 1 for r in rows[:1]) and rows[-1]["pool"] == 1  # one question, one action
    assert rows[-1]["success_rate"] > rows[0]["success_rate"]
    question = agent.question(0, envs[0].reset(seed=0)[1]["candidates"])
    assert json.loads((tmp_path / "questions.json").read_text()) == [question_digest(question.context)]
    assert summary["questions_played"] == 1  # the bandit asks one question
    assert (summary["labels"], summary["label_agreement"]) == (1, 1.0)  # the final argmax on every label: east
    fits = [(r["fresh_decisions"], r["clone_steps"], r["clone_agreement"]) for r in rows]
    assert fits[0][0] == 1 and fits[0][1] >= 1 and fits[1:] == [(0, 0, 1.0)] * 5  # fitted once, then only checked
    assert (tmp_path / "learning_curve.png").exists() and (tmp_path / "adapter" / "jetgym_adapter.json").exists()


class Penalty(gym.Env):
    """One step; action 1 costs 1, action 0 costs 2: returns differ, no success and no positive reward."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, -1.0 - float(action == 0), True, False, {}


class Flat(Penalty):
    """One step; both actions earn 1: every group has one return, so nothing can be kept or planned."""

    def step(self, action):
        return 0, 1.0, True, False, {}


def test_rft_that_keeps_nothing_writes_the_untrained_adapter_and_says_so(tmp_path):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=2), seed=0)
    envs = [CandidateActions(Flat(), texts=["a", "b"])]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    before = [p.detach().clone() for p in policy.parameters()]
    summary = run_rft(
        policy, envs, agent, RFTOptions(group=4, seeds_per_round=2, num_envs=1), tmp_path, 8, progress=False
    )
    assert summary["warning"] == (
        "algorithm=rft kept no episode in 8 env steps (8 episodes, best return 1): every group of train.group "
        "episodes had one return, so nothing was learnt and the adapter is the untrained model's; raise "
        "train.env_steps, train.group or train.explore"
    )
    assert json.loads((tmp_path / "summary.json").read_text())["warning"] == summary["warning"]
    assert rft.nothing_kept(8, 1, None, "auto", False).endswith(
        "no episode ended within the budget, so nothing was learnt and the adapter is the untrained model's; raise "
        "train.env_steps"
    )
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    lora_b = [v for k, v in saved.items() if "lora_B" in k]
    assert lora_b and not any(b.any() for b in lora_b)  # B = 0: the adapter scores as the base model does


def test_rft_bad_inputs_name_the_field(tmp_path):
    for keep in ("top:0", "top:1.5", "top", "best"):
        with pytest.raises(
            ValueError,
            match=f"train.keep must be auto, success or top:F with a fraction 0 < F <= 1 "
            rf"\(e.g. top:0.25\), got '{keep}'",
        ):
            RFTOptions(keep=keep)
    with pytest.raises(ValueError, match="train.group must be >= 1, got 0"):
        RFTOptions(group=0)
    with pytest.raises(ValueError, match=r"train.explore must be in \[0, 1\], got 2"):
        RFTOptions(explore=2)
    with pytest.raises(ValueError, match=r"train.gamma must be in \[0, 1\], got 1.5"):
        RFTOptions(gamma=1.5)
    with pytest.raises(ValueError, match="train.advantage must be one of episode, step-group, plan, got 'steps'"):
        RFTOptions(advantage="steps")
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=2), seed=0)
    envs = [CandidateActions(Penalty(), texts=["a", "b"])]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    with pytest.raises(
        ValueError,
        match=r"algorithm=rft kept no episode in 8 env steps \(8 episodes, best return -1\): "
        r"the env reported no info\['is_success'\] and no episode ended on a positive "
        r"reward, so train.keep=success keeps nothing; use train.keep=auto",
    ):
        run_rft(
            policy,
            envs,
            agent,
            RFTOptions(group=4, seeds_per_round=2, num_envs=1, keep="success", advantage="episode"),
            tmp_path / "s",
            env_steps=8,
            progress=False,
        )
    planned = run_rft(
        policy,
        envs,
        agent,
        RFTOptions(group=4, seeds_per_round=2, num_envs=1, keep="success"),
        tmp_path / "plan",
        env_steps=8,
        progress=False,
    )
    assert planned["kept_episodes"] == 0  # no episode kept, but planning valued both actions: something to clone
    summary = run_rft(
        policy,
        envs,
        agent,
        RFTOptions(group=4, seeds_per_round=2, num_envs=1),
        tmp_path / "auto",
        env_steps=8,
        progress=False,
    )
    assert summary["kept_episodes"] >= 1  # auto keeps the better episodes of a group without success


def cli(*overrides, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "jetgym-train"), *overrides],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )


def test_rft_cli_refuses_options_of_other_algorithms_and_box_actions(tmp_path):
    done = cli("algorithm=ppo", "train.keep=success", f"output_dir={tmp_path / 'a'}")
    assert done.returncode != 0
    assert (
        "train.keep is an option of algorithm=rft, not of algorithm=ppo: remove it or change the algorithm"
        in done.stderr
    )
    done = cli("algorithm=rft", "train.unique=true", f"output_dir={tmp_path / 'b'}")
    assert (
        "train.unique merges repeated labelled questions: set it with algorithm=sft or bc only (got algorithm=rft)"
        in done.stderr
    )
    done = cli("algorithm=rft", "env=gym", "env.id=MountainCarContinuous-v0", f"output_dir={tmp_path / 'c'}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "MountainCarContinuous-v0" in done.stderr and "Box" in done.stderr, done.stderr[-2000:]


RESUMED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_rft import bandit_run
    from jetgym.training import rft
    from jetgym.training.options import RFTOptions
    from jetgym.training.run import run_rft
    policy, envs, agent = bandit_run()
    if sys.argv[1] == "slow":  # stop in the third round, after round 2's checkpoint: the parent kills it there
        original, calls = rft.play_round, []
        def play_round(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                print("checkpointed", flush=True)
                time.sleep(600)
            return original(*args, **kwargs)
        rft.play_round = play_round
    options = RFTOptions(group=2, seeds_per_round=2, num_envs=2, updates=2, minibatch=2, learning_rate=0.02,
                         advantage="plan")
    run_rft(policy, envs, agent, options, sys.argv[2], env_steps=20, seed=1, progress=False)
    print("done", flush=True)
""")


def test_rft_resumes_after_kill_and_trains_the_uninterrupted_adapter(tmp_path):

    script = tmp_path / "run.py"
    script.write_text(RESUMED.format(tests=TESTS))
    out, straight = tmp_path / "out", tmp_path / "straight"
    child = subprocess.Popen([sys.executable, str(script), "slow", str(out)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "checkpointed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    pointer = json.loads((out / "checkpoint.json").read_text())
    assert pointer["update"] == 2 and pointer["env_steps"] == 8
    (state,) = pointer["transitions"]  # the bandit's one question, both actions, every step of the 8 kept
    assert sum(visits for visits, _, _ in state["actions"].values()) == 8
    for folder in (out, straight):
        finished = subprocess.run(
            [sys.executable, str(script), "fast", str(folder)], capture_output=True, text=True, timeout=600
        )
        assert finished.returncode == 0, finished.stderr
    assert [r["round"] for r in rows_of(out)] == [1, 2, 3, 4, 5]
    assert [r["pool"] for r in rows_of(out)] == [r["pool"] for r in rows_of(straight)]
    resumed, whole = (load_file(f / "adapter" / "adapter_model.safetensors") for f in (out, straight))
    assert resumed.keys() == whole.keys()
    assert all(torch.allclose(resumed[k], whole[k], atol=1e-6) for k in resumed)


class MisleadingRooms(gym.Env):
    """Two rooms; the hall's text says the treasure is north, but only `go south` (then `open chest`) wins."""

    observation_space = gym.spaces.Text(200)
    action_space = gym.spaces.Text(40)
    COMMANDS = {"hall": ["go north", "go south"], "north": ["go back"], "south": ["open chest", "go back"]}
    TEXTS = {
        "hall": "You are in a hall. The treasure is north, says a sign.",
        "north": "An empty room. The hall is back.",
        "south": "A small room with a chest. The hall is back.",
    }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.room = "hall"
        return self.TEXTS["hall"], {"admissible_commands": self.COMMANDS["hall"]}

    def step(self, action):
        won = action == "open chest"
        self.room = {"go north": "north", "go south": "south", "go back": "hall"}.get(action, self.room)
        text = "You open the chest: gold! You win." if won else self.TEXTS[self.room]
        return text, float(won), won, False, {"admissible_commands": self.COMMANDS[self.room]}


@pytest.mark.slow
def test_rft_learns_a_text_env_whose_words_mislead_the_zero_shot_scorer(tmp_path):
    from jetgym.agents import rollout

    def env():
        return CandidateActions(gym.wrappers.TimeLimit(MisleadingRooms(), 6))

    scorer = make_scorer("jet")
    task = "Find the treasure."
    zero_shot = rollout(env(), make_agent("scorer", scorer=scorer, task=task, policy="argmax"), 3, 0, progress=False)
    assert all(e["return"] == 0 for e in zero_shot)  # it follows the sign north and back, never the chest
    policy = Policy(scorer, LoraOptions(), seed=0)
    agent = make_agent("scorer", scorer=policy.scorer, task=task, policy="sample")
    summary = run_rft(policy, [env() for _ in range(8)], agent, RFTOptions(), tmp_path, env_steps=400, progress=False)
    trained = make_scorer("jet", adapter=str(tmp_path / "adapter"))
    after = rollout(env(), make_agent("scorer", scorer=trained, task=task, policy="argmax"), 3, 0, progress=False)
    assert all(e["return"] == 1 for e in after), (summary, after)


def fit_case(learning_rate: float, **options):
    """A tiny policy and three questions labelled against its zero-shot argmax, with the options to clone them."""
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    asked = [Question(context=f"Choose. room {i}", candidates=["go west", "go east"]) for i in range(3)]
    agreed = [d.choice == 0 for d in policy.scorer.decide_many(asked)]
    cloned = [rft.Kept(Question(q.context, q.candidates, gold=int(a)), 1.0, 1) for q, a in zip(asked, agreed)]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=learning_rate)
    return policy, optimizer, cloned, RFTOptions(minibatch=2, learning_rate=learning_rate, **options)


def test_measure_reads_what_the_round_played_and_runs_the_rest_through_the_kept_trunk():
    """The fit's measure agrees with the scorer (one full forward per question, after a step moved the weights):
    a question the round played is read back, the rest go through the policy, the trained layers alone once
    their trunk is kept."""
    from jetgym.training.run import measure

    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8, lora_layers=1), seed=0)
    asked = [Question(context=f"Choose. room {i}", candidates=["go west", "go east", "wait"]) for i in range(4)]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.05)
    fit_step(policy, optimizer, [replace(q, gold=1) for q in asked], SFTOptions())
    assert len(policy.trunk.kept) == 4  # the step kept every question's trunk states
    played = policy.scorer.decide_many(asked[:2])  # memoized, as a round's play
    golds = [[0], [1, 2], [2], [0, 1]]
    ran_below = []
    policy.trunk._keep = lambda key, row: ran_below.append(key)
    checked = measure(policy, [replace(q, gold=0) for q in asked], Shards(), golds)
    assert (checked.read, checked.evaluated) == (2, 2) and ran_below == []  # the trunk's states were read
    plain = [policy.scorer.scorer.decide_many([q])[0] for q in asked]  # unmemoized, one question at a time
    assert plain[:2] == played
    assert checked.agreed == [d.choice in g for d, g in zip(plain, golds)]
    assert checked.nll == pytest.approx([d.nll_of(g) for d, g in zip(plain, golds)], abs=1e-4)


def test_cloning_stops_once_the_argmax_agrees_and_skips_what_already_agrees():
    from jetgym.training.run import FitRecord, clone_to_fit

    policy, optimizer, cloned, options = fit_case(0.05, updates=100)
    generator, record = torch.Generator().manual_seed(0), FitRecord()
    first = clone_to_fit(policy, optimizer, cloned, record, options, False, Shards(), generator)
    assert (first.fresh, first.replayed, first.agreement) == (3, 0, 1.0)  # nothing fitted before: all three fresh
    assert 2 <= first.steps < 100  # one pass at least (every label was wrong), stopped at agreement, not the cap
    assert sorted(record.fitted.values()) == sorted(k.accepted() for k in cloned) and record.missed == {}
    again = clone_to_fit(policy, optimizer, cloned, record, options, False, Shards(), generator)
    assert (again.fresh, again.replayed, again.steps, again.agreement) == (0, 2, 0, 1.0)  # a minibatch re-checked
    assert again.loss < math.log(2)  # two candidates, the label ahead: q(label) > 1/2


def test_cloning_that_cannot_fit_stops_at_the_cap():
    from jetgym.training.run import FitRecord, clone_to_fit

    policy, optimizer, cloned, options = fit_case(1e-12, updates=5)
    record = FitRecord()
    fit = clone_to_fit(policy, optimizer, cloned, record, options, False, Shards(), torch.Generator().manual_seed(0))
    assert (fit.steps, fit.agreement, record.fitted) == (5, 0.0, {})
    one_pass = clone_to_fit(
        policy, optimizer, cloned, FitRecord(), RFTOptions(updates=1, minibatch=2), False, Shards(), torch.Generator()
    )
    assert one_pass.steps == 2  # the cap is at least one pass over the round's decisions
    played = clone_to_fit(
        policy, optimizer, cloned, FitRecord(), options, False, Shards(), torch.Generator(), played_steps=200
    )
    assert played.steps == 7  # and one step per 32 env steps the round played: ceil(200 / 32)
    slower = replace(options, env_steps_per_update=100)  # ceil(200 / 100) = 2: the 5 updates are more
    capped = clone_to_fit(policy, optimizer, cloned, FitRecord(), slower, False, Shards(), torch.Generator(), 200)
    assert capped.steps == 5
    cut = clone_to_fit(policy, optimizer, cloned, FitRecord(), options, False, Shards(), torch.Generator(), 3, 0.2)
    assert cut.steps == 2  # a round the budget cut at a fifth of its episodes: ceil(5 * 0.2) = 1, then one pass
    final = clone_to_fit(
        policy, optimizer, cloned, FitRecord(), options, False, Shards(), torch.Generator(), final=True
    )
    assert final.steps == 10  # the last round: its cap times train.tries (2), as no later round tries again


def test_labels_that_never_fit_leave_the_fresh_set_after_their_tries():
    """A round's cost follows what it adds: labels missed in `tries` rounds are replayed by sample, not re-cloned
    whole each round, while a new question or a changed label is fresh again."""
    from jetgym.training.run import FitRecord, clone_to_fit

    policy, optimizer, cloned, options = fit_case(1e-12, updates=1, tries=2, replay_ratio=0)
    record, generator = FitRecord(), torch.Generator().manual_seed(0)
    fits = [clone_to_fit(policy, optimizer, cloned, record, options, False, Shards(), generator) for _ in range(4)]
    assert [(f.fresh, f.replayed) for f in fits] == [(3, 0), (3, 0), (0, 2), (0, 2)]  # then a minibatch of the rest
    assert [f.steps for f in fits] == [2, 2, 0, 0] and all(f.agreement == 0 for f in fits)  # replayed, not waited for
    assert sorted(record.missed.values()) == sorted((k.accepted(), 2) for k in cloned)
    flipped = [rft.Kept(replace(cloned[0].decision, gold=1 - cloned[0].decision.gold), 1.0, 1)] + cloned[1:]
    new = rft.Kept(Question(context="Choose. room 9", candidates=["go west", "go east"], gold=0), 1.0, 1)
    fit = clone_to_fit(policy, optimizer, flipped + [new], record, options, False, Shards(), generator)
    assert fit.fresh == 2  # the changed label and the new question
    restored = FitRecord.from_rows(json.loads(json.dumps(record.rows())))
    assert (restored.fitted, restored.missed) == (record.fitted, record.missed)


def test_the_final_round_refits_every_fitted_label_the_clone_drifted_off():
    """A round replays only a sample of the fitted labels, so one the clone drifted off since is found late; the
    final round measures every fitted label and fits the drifted ones again. Labels given up after their tries are
    left out of that sweep, as they are of the rounds' targets."""
    from jetgym.training.run import FitRecord, clone_to_fit

    policy, optimizer, cloned, options = fit_case(0.05, updates=100, tries=2, replay_ratio=0)
    keys = [rft.state_key(k.decision) for k in cloned]
    drifted = {key: k.accepted() for key, k in zip(keys, cloned)}  # recorded as fitted, yet every argmax is off
    sampled = clone_to_fit(
        policy, optimizer, cloned, FitRecord(dict(drifted)), options, False, Shards(), torch.Generator()
    )
    assert (sampled.fresh, sampled.replayed) == (0, 2)  # a round: a minibatch of the fitted rest
    given_up = FitRecord(dict(list(drifted.items())[:2]), {keys[2]: (cloned[2].accepted(), 2)})
    skips = clone_to_fit(policy, optimizer, cloned, given_up, options, False, Shards(), torch.Generator(), final=True)
    assert (skips.fresh, skips.replayed) == (0, 2)  # the third was missed in both its tries
    policy, optimizer, cloned, options = fit_case(0.05, updates=100, tries=2, replay_ratio=0)
    final = clone_to_fit(
        policy, optimizer, cloned, FitRecord(dict(drifted)), options, False, Shards(), torch.Generator(), final=True
    )
    assert (final.fresh, final.replayed, final.agreement) == (0, 3, 1.0)
    assert 2 <= final.steps < 100  # all three were off: trained until they agree, not to the cap
    decided = policy.scorer.decide_many([replace(k.decision, gold=None) for k in cloned])
    assert [d.choice in k.accepted() for d, k in zip(decided, cloned)] == [True, True, True]


def test_fit_options_refuse_bad_values():
    with pytest.raises(ValueError, match=r"train.fit must be in \(0, 1\], got 0"):
        RFTOptions(fit=0)
    with pytest.raises(ValueError, match=r"train.fit must be in \(0, 1\], got 1.5"):
        RFTOptions(fit=1.5)
    with pytest.raises(ValueError, match="train.replay_ratio must be >= 0, got -1"):
        RFTOptions(replay_ratio=-1)
    with pytest.raises(ValueError, match="train.updates must be >= 1, got 0"):
        RFTOptions(updates=0)
    with pytest.raises(ValueError, match="train.tries must be >= 1, got 0"):
        RFTOptions(tries=0)
    with pytest.raises(ValueError, match="train.env_steps_per_update must be >= 1, got 0"):
        RFTOptions(env_steps_per_update=0)


def test_a_label_whose_tie_the_argmax_already_takes_is_fitted_without_a_step():
    """Equally good actions (a planned label's ties) count together: labels against the zero-shot argmax need
    steps, but the same labels with the argmax as a tie already agree, so the round takes none."""
    from jetgym.training.run import FitRecord, clone_to_fit

    policy, optimizer, cloned, options = fit_case(0.05, updates=100)
    tied = [replace(k, ties=(1 - k.decision.gold,)) for k in cloned]
    assert [k.accepted() for k in tied] == [[0, 1]] * 3
    record = FitRecord()
    fit = clone_to_fit(policy, optimizer, tied, record, options, False, Shards(), torch.Generator().manual_seed(0))
    assert (fit.fresh, fit.steps, fit.agreement) == (3, 0, 1.0)
    # the ties narrowed to the gold alone (what a later round's planning may find): new labels, fresh again
    untied = clone_to_fit(policy, optimizer, cloned, record, options, False, Shards(), torch.Generator())
    assert untied.fresh == 3 and untied.steps >= 2  # every one missed before the first step


def test_refit_fits_a_fresh_adapter_to_the_last_rounds_labels():
    """`train.refit` starts from the adapter as it was made, whatever the rounds trained: the refit of a clone
    trained on the opposite labels equals the refit of an untouched policy, and fits every label before its cap."""
    from jetgym.training.run import refit

    fresh, _, cloned, options = fit_case(0.05, refit=20)
    initial = fresh.state()
    trained, optimizer, _, _ = fit_case(0.05)
    flipped = [replace(k.decision, gold=1 - k.decision.gold) for k in cloned]
    for _ in range(20):
        fit_step(trained, optimizer, flipped, options)
    assert any(not torch.equal(initial[name], tensor) for name, tensor in trained.state().items())
    trained.reset()
    assert all(torch.equal(initial[name], tensor) for name, tensor in trained.state().items())
    done = [refit(p, cloned, options, False, Shards(), torch.Generator().manual_seed(0)) for p in (fresh, trained)]
    assert done[0]["agreement"] == 1.0 and 2 <= done[0]["steps"] < 20 * 2  # stopped once fitted, not at the cap
    assert done[0]["steps"] == done[1]["steps"]
    assert all(torch.equal(fresh.state()[name], tensor) for name, tensor in trained.state().items())


def test_refit_that_cannot_fit_stops_after_its_passes_at_a_decaying_rate():
    from jetgym.training.run import refit

    policy, _, cloned, options = fit_case(1e-12, refit=3)
    done = refit(policy, cloned, options, False, Shards(), torch.Generator().manual_seed(0))
    assert (done["steps"], done["agreement"]) == (6, 0.0)  # 3 passes of 2 minibatches (3 labels, minibatch 2)


def test_rft_with_refit_skips_the_final_sweep_and_refits_the_last_rounds_labels(tmp_path):
    policy, envs, agent = bandit_run()
    options = RFTOptions(group=4, seeds_per_round=2, num_envs=2, updates=4, minibatch=4, learning_rate=0.02, refit=8)
    summary = run_rft(policy, envs, agent, options, tmp_path, env_steps=24, progress=False)
    rows = rows_of(tmp_path)
    assert rows[-1]["clone_steps"] == 0 and rows[-1]["fresh_decisions"] == 0  # the last round is not cloned
    assert summary["refit"]["steps"] >= 1 and summary["refit"]["agreement"] == 1.0
    assert (summary["labels"], summary["label_agreement"]) == (1, 1.0)  # the refitted adapter plays east
    assert p_east(policy) > 0.5


def test_refit_refuses_bad_values_and_a_policy_without_an_adapter(tmp_path):
    with pytest.raises(ValueError, match="train.refit must be >= 0, got -1"):
        RFTOptions(refit=-1)
    policy = Policy(tiny_scorer(), LoraOptions(finetune="full"), seed=0)
    with pytest.raises(ValueError, match="resetting the policy needs a LoRA adapter"):
        policy.reset()
    envs = [CandidateActions(Bandit(), texts=["go west", "go east"])]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    with pytest.raises(
        ValueError, match="train.refit fits a fresh LoRA adapter: set train.finetune=lora, or train.refit=0"
    ):
        run_rft(policy, envs, agent, RFTOptions(num_envs=1, refit=2), tmp_path, env_steps=8, progress=False)
