"""Reward-filtered self-imitation (expert iteration, `algorithm=rft`): learning from the env's own reward.

A round:
1. plays `group` episodes from each of `seeds_per_round` fresh training seeds, `num_envs` envs at a time, one
   `decide_many` call per step (decisions memoized within the round: the weights do not change during it).
   Actions are sampled from q at the agent's temperature mixed with the uniform distribution over the admissible
   candidates: episode g of a group mixes in `explore * g / (group - 1)`, so every group holds episodes that
   follow the model's prior and episodes that explore regardless of it (a prior that points the wrong way is
   overcome without any setting).
2. keeps episodes by `keep`, group by group (`keep_group`): a group whose episodes all have the same return
   teaches nothing and is dropped; `success` keeps the successful episodes (`ppo.success_of`: `is_success`,
   else a positive final reward); `top:F` the top fraction F by return, never the group's worst; `auto` (the
   default) keeps the successes of a group where some episodes succeed and others fail and success is the goal
   (`success_is_the_goal`: reported by the env, or no reward before the last step), else its top quarter.
3. adds the kept episodes' decisions to the pool, each question once with the action taken at its last visit
   (the loop-erased episode: an action that led back to an earlier state is not the one that left it); a
   question already in the pool keeps the action with the better continuation (more return to go, then fewer
   steps), so the pool holds one action per question and no loops between them; and clones the pool
   (`sft.gold_nll` over the candidates) to fit (`jetgym.training.run.clone_to_fit`): the decisions not yet fitted
   and a replayed sample of the rest, on minibatches of `minibatch` decisions, until their argmax agrees with the
   labels (`fit`) or `updates` steps are taken; the last round replays every fitted label, not a sample (with
   `refit`, a fresh adapter is fitted to all of the last round's labels instead: `run.refit`). The pool keeps the
   `replay` most recent distinct decisions, so earlier rounds' successes are trained on again.
With `advantage=step-group` (step-level group advantages, GiGPO's at the action level), step 3 also adds, at
every question the round visited with more than one action, the action of best mean return to go when it beats
the question's mean (`step_groups`): a state that recurs across episodes compares its actions directly, even in
episodes that were not kept. Its clone is weighted by that advantage over the spread of all the round's returns
to go (at most 1), so an action that won by a hair, as by chance, weighs little.
With `advantage=plan`, every transition of every round so far is planned on (`jetgym.training.plan`: value
iteration on the empirical MDP whose states are the questions), and at each question played with more than one
action, where every candidate was played or a kept episode passed, the best one, with any played action of the
same value as its ties (`Kept.accepted`: the clone may agree on any of them), is cloned in place of the pool's
(`with_planned`); the exploring share of step 1's draws goes to the actions of an optimistic explorer planned on
the same transitions (`Transitions.explorer`).
Returns to go are discounted by `gamma` (default 0.95): on a long episode cut by a time limit, an undiscounted
return to go mostly counts the steps left, whatever the action; discounted, it weighs what follows soon.
Rounds go on until `env_steps` env steps have been played (the last round is cut there: in one process the
budget is exact).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from jetgym.agents.rollout import env_reset, env_step
from jetgym.scorers import Question
from jetgym.scorers.decision import draw

from .options import RFTOptions
from .plan import state_key
from .ppo import success_of


@dataclass
class Played:
    """One finished episode: its training seed, its place in the group, the decisions taken (gold: the action)."""

    seed: int
    member: int
    decisions: list[Question] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    success: bool = False
    reported: bool = False  # the env said whether it succeeded (`info["is_success"]`)
    terminated: bool = False
    ended: bool = False  # terminated or truncated by the env (not cut by the budget)

    @property
    def total(self) -> float:
        return float(sum(self.rewards))


def round_seeds(seed: int, round_: int, options: RFTOptions) -> list[int]:
    """The training seeds of round `round_` (never the small seeds evaluations use)."""
    start = 1_000_000 * (seed + 1) + round_ * options.seeds_per_round
    return list(range(start, start + options.seeds_per_round))


def explore_of(member: int, options: RFTOptions) -> float:
    """The uniform mixture weight of the `member`-th episode of a group."""
    return options.explore * member / (options.group - 1) if options.group > 1 else options.explore


def play_round(
    envs: Sequence[Any],
    agent,
    scorer,
    seeds: Sequence[int],
    options: RFTOptions,
    temperature: float,
    episode_seed: int,
    budget: int | None = None,
    on_steps: Callable[[int], None] | None = None,
    explorer: dict[bytes, list[int]] | None = None,
) -> list[Played]:
    """`options.group` episodes of every seed, played `len(envs)` at a time; in (seed, member) order. `budget`:
    the most env steps to play; when it runs out, the episodes under way end there (cut, as by a time limit) and
    the ones not begun are left out. `on_steps(n)`: called after each batch of decisions with its env steps.
    `explorer` (`plan.Transitions.explorer`): at the questions it lists, the exploring share of a draw goes to its
    actions (elsewhere, to every candidate alike)."""
    todo = [(s, m) for s in seeds for m in range(options.group)]
    played = [Played(s, m) for s, m in todo]
    slots: list[dict | None] = [None] * len(envs)
    upcoming = 0

    def start(k: int) -> None:
        nonlocal upcoming
        if upcoming >= len(todo):
            slots[k] = None
            return
        s, m = todo[upcoming]
        observation, info = env_reset(envs[k], s)
        agent.reset(s, slot=k)
        slots[k] = {
            "index": upcoming,
            "observation": observation,
            "candidates": info["candidates"],
            "rng": np.random.default_rng([episode_seed, s, m]),
            "explore": explore_of(m, options),
        }
        upcoming += 1

    for k in range(len(envs)):
        start(k)
    steps = 0
    while any(slot is not None for slot in slots) and (budget is None or steps < budget):
        active = [k for k, slot in enumerate(slots) if slot is not None]
        questions = [agent.question(slots[k]["observation"], slots[k]["candidates"], k) for k in active]
        before = steps
        for k, question, decision in zip(active, questions, scorer.decide_many(questions)):
            if budget is not None and steps >= budget:
                break
            steps += 1
            slot = slots[k]
            candidates = slot["candidates"]
            towards = explorer.get(state_key(question)) if explorer else None
            index = draw(decision.corrected, temperature, slot["rng"], slot["explore"], towards)
            agent.record(candidates.texts[index], k)
            episode = played[slot["index"]]
            episode.decisions.append(
                Question(
                    context=question.context,
                    candidates=question.candidates,
                    labels=question.labels,
                    images=question.images,
                    gold=index,
                )
            )
            observation, reward, terminated, truncated, info = env_step(envs[k], candidates.actions[index])
            episode.rewards.append(float(reward))
            if terminated or truncated:
                episode.success, episode.terminated, episode.ended = success_of(info, reward), bool(terminated), True
                episode.reported = "is_success" in info
                start(k)
            else:
                slot["observation"], slot["candidates"] = observation, info["candidates"]
        if on_steps is not None:
            on_steps(steps - before)
    return [episode for episode in played if episode.decisions]


def keep_group(episodes: Sequence[Played], keep: str) -> list[Played]:
    """The episodes of one group (one seed) that `keep` selects (see the module notes)."""
    returns = [e.total for e in episodes]
    if max(returns) == min(returns):
        return []
    successes = {e.success for e in episodes}
    if keep == "success" or (keep == "auto" and len(successes) > 1 and success_is_the_goal(episodes)):
        return [e for e in episodes if e.success]
    fraction = 0.25 if keep == "auto" else float(keep.split(":", 1)[1])
    threshold = sorted(returns, reverse=True)[max(1, math.ceil(fraction * len(returns))) - 1]
    return [e for e in episodes if e.total >= threshold and e.total > min(returns)]


def success_is_the_goal(episodes: Sequence[Played]) -> bool:
    """Whether success tells the group's better episodes (`keep=auto`): the env reports it, or no episode earns
    reward before its last step. Where reward comes along the way, a last step that earns is not a goal reached
    (a walk of one right turn in eight that ends on it is no better than one of seven that does not): the return
    ranks them."""
    return all(e.reported for e in episodes) or not any(r > 0 for e in episodes for r in e.rewards[:-1])


def kept_episodes(played: Sequence[Played], keep: str) -> list[Played]:
    """`keep_group` over every seed's group, of the episodes that ended (one cut by the budget is not compared: its
    return is that of fewer steps)."""
    groups: dict[int, list[Played]] = {}
    for episode in (e for e in played if e.ended):
        groups.setdefault(episode.seed, []).append(episode)
    return [e for group in groups.values() for e in keep_group(group, keep)]


@dataclass(frozen=True)
class Kept:
    """A kept decision (gold: the action taken) and what followed it in its episode: the return and the steps
    to the episode's end; `ties`: other actions cloned as equally right (a planned label's equally good ones)."""

    decision: Question
    return_to_go: float
    steps_to_go: int
    weight: float = 1.0
    ties: tuple[int, ...] = ()

    def accepted(self) -> list[int]:
        """The candidate indices the clone may put its argmax on: the gold's text and every tie's."""
        texts = {self.decision.candidates[i] for i in (int(self.decision.gold), *self.ties)}
        return [i for i, text in enumerate(self.decision.candidates) if text in texts]

    def better_than(self, other: "Kept") -> bool:
        """More return to go, then fewer steps to it; a tie goes to the newer (`self`)."""
        return (self.return_to_go, -self.steps_to_go) >= (other.return_to_go, -other.steps_to_go)


def loop_erased(episode: Played, gamma: float = 1.0) -> list[Kept]:
    """The episode's decisions, each distinct question once, with the action of its last visit."""
    last: dict[bytes, Kept] = {}
    steps = len(episode.decisions)
    for t, (decision, to_go) in enumerate(zip(episode.decisions, returns_to_go(episode.rewards, gamma))):
        key = state_key(decision)
        last.pop(key, None)
        last[key] = Kept(decision, to_go, steps - t)
    return list(last.values())


def returns_to_go(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """Each step's return to go: its reward and every later one in the episode, the k-th later one discounted by
    gamma**k (one pass from the end)."""
    total, backwards = 0.0, []
    for reward in reversed(rewards):
        total = float(reward) + gamma * total
        backwards.append(total)
    return backwards[::-1]


def step_groups(played: Sequence[Played], gamma: float = 1.0) -> list[Kept]:
    """Step-level group advantages (`advantage=step-group`): every visit of a question in the round's episodes is
    one sample of its action's return to go; at a question visited with more than one action, the action of best
    mean return to go (then fewest mean steps to go) is kept when its mean beats the question's mean over every
    visit (a positive advantage), with those means as its continuation and, as its weight, the advantage over
    the standard deviation of every return to go of the round, at most 1."""
    visits: dict[bytes, dict[int, list[tuple[float, int]]]] = {}  # question -> action -> (return, steps) to go
    last: dict[tuple[bytes, int], Question] = {}  # (question, action) -> its last decision
    for episode in played:
        steps = len(episode.decisions)
        for t, (decision, to_go) in enumerate(zip(episode.decisions, returns_to_go(episode.rewards, gamma))):
            key, action = state_key(decision), int(decision.gold)
            visits.setdefault(key, {}).setdefault(action, []).append((to_go, steps - t))
            last[key, action] = decision
    spread = float(np.std([g for actions in visits.values() for taken in actions.values() for g, _ in taken] or [0]))
    kept = []
    for key, actions in visits.items():
        if len(actions) < 2:
            continue
        means = {a: (_mean([g for g, _ in taken]), -_mean([n for _, n in taken])) for a, taken in actions.items()}
        best = max(means, key=lambda a: means[a])
        advantage = means[best][0] - _mean([g for taken in actions.values() for g, _ in taken])
        if advantage > 0:
            weight = min(1.0, advantage / spread)
            kept.append(Kept(last[key, best], means[best][0], round(-means[best][1]), weight))
    return kept


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


class Pool:
    """The kept decisions cloned each round: one action per distinct question, the `size` most recently kept.

    A question kept again takes the new action when its continuation is at least as good (`Kept.better_than`).
    So the cloned actions of kept episodes never form a loop in a deterministic env: each one's best kept
    continuation is shorter than that of the question it came from (step-group decisions, means over visits,
    carry no such guarantee)."""

    def __init__(self, size: int, rows: Sequence[dict] = ()):
        self.size = size
        self.items: OrderedDict[bytes, Kept] = OrderedDict()
        self.add(kept_from_row(row) for row in rows)

    def add(self, kept) -> int:
        """Add kept decisions (a repeated question moves to the newest end); returns how many questions were new."""
        new = 0
        for item in kept:
            key = state_key(item.decision)
            old = self.items.pop(key, None)
            new += old is None
            self.items[key] = item if old is None or item.better_than(old) else old
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return new

    def kept(self) -> list[Kept]:
        return list(self.items.values())

    def rows(self) -> list[dict]:
        """The pool as JSON rows (checkpoints)."""
        return [
            {
                "context": k.decision.context,
                "candidates": list(k.decision.candidates),
                "labels": list(k.decision.labels or ()),
                "gold": k.decision.gold,
                "return_to_go": k.return_to_go,
                "steps_to_go": k.steps_to_go,
                "weight": k.weight,
            }
            for k in self.items.values()
        ]


def with_planned(pool: Pool, planned: Sequence[Kept]) -> list[Kept]:
    """What a round clones: the planned labels (`advantage=plan`), then the pool's decisions at other questions."""
    keys = {state_key(k.decision) for k in planned}
    return list(planned) + [k for k in pool.kept() if state_key(k.decision) not in keys]


class Labelled(NamedTuple):
    """What one round's play gives to clone: the kept episodes, the step-group and planned decisions, how many
    questions were new to the pool, and what the round clones (`with_planned`)."""

    kept: list[Played]
    stepped: list[Kept]
    planned: list[Kept]
    new: int
    cloned: list[Kept]


def label_round(played: Sequence[Played], pool: Pool, transitions, options: RFTOptions) -> Labelled:
    """Steps 2-3 of a round (module notes): keep, pool the loop-erased kept decisions (and step groups), add every
    episode to `transitions` and plan on them (`advantage=plan`), and list what is cloned. A planned label is
    trusted where every candidate was played or a kept episode passed; elsewhere the best played action may only
    be the best of the few tried, and the question is left to the pool."""
    kept = kept_episodes(played, options.keep)
    stepped = step_groups(played, options.gamma) if options.advantage == "step-group" else []
    new = pool.add([d for e in kept for d in loop_erased(e, options.gamma)] + stepped)
    planned = []
    if options.advantage == "plan":
        for episode in played:
            transitions.add(episode.decisions, episode.rewards, episode.terminated)
        planned = [
            Kept(label.decision, label.value, 0, ties=label.ties)
            for label in transitions.labels(options.gamma)
            if transitions.tried_all(key := state_key(label.decision)) or key in pool.items
        ]
    return Labelled(kept, stepped, planned, new, with_planned(pool, planned))


def kept_from_row(row: dict) -> Kept:
    question = Question(
        context=row["context"], candidates=row["candidates"], labels=row["labels"] or None, gold=row["gold"]
    )
    return Kept(question, row["return_to_go"], row["steps_to_go"], row.get("weight", 1.0))


def nothing_kept(steps: int, episodes: int, best: float | None, keep: str, any_success_signal: bool) -> str:
    """What a budget that ended with nothing ever kept says. A `keep` that could never keep anything in this env is a
    user error (raised); otherwise no group's returns differed in the budget (a sparse reward never found), and the
    adapter is written unchanged (the model's zero-shot policy) with this message as the summary's warning."""
    said = (
        f"algorithm=rft kept no episode in {steps} env steps ({episodes} episodes, best return "
        f"{'none' if best is None else f'{best:g}'}): "
    )
    if keep == "success" and not any_success_signal:
        raise ValueError(
            said + "the env reported no info['is_success'] and no episode ended on a positive reward, so "
            "train.keep=success keeps nothing; use train.keep=auto or train.keep=top:0.25"
        )
    untrained = "so nothing was learnt and the adapter is the untrained model's"
    if best is None:
        return said + f"no episode ended within the budget, {untrained}; raise train.env_steps"
    return said + (
        f"every group of train.group episodes had one return, {untrained}; raise train.env_steps, train.group "
        "or train.explore"
    )
