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
   default) keeps the successes of a group where some episodes succeed and others fail, else its top quarter.
3. adds the kept episodes' decisions to the pool, each question once with the action taken at its last visit
   (the loop-erased episode: an action that led back to an earlier state is not the one that left it), and
   clones the pool (`sft.gold_nll` over the candidates) with `updates` optimizer steps on minibatches of
   `minibatch` decisions. The pool keeps the `replay` most recent distinct decisions, so earlier rounds'
   successes are trained on again.
Rounds go on until `env_steps` env steps have been played.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from jetgym.scorers import Question
from jetgym.scorers.memo import question_key

from .options import RFTOptions
from .ppo import success_of


@dataclass
class Played:
    """One finished episode: its training seed, its place in the group, the decisions taken (gold: the action)."""

    seed: int
    member: int
    decisions: list[Question] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    success: bool = False

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


def play_round(envs: Sequence[Any], agent, scorer, seeds: Sequence[int], options: RFTOptions, temperature: float,
               episode_seed: int) -> list[Played]:
    """`options.group` episodes of every seed, played `len(envs)` at a time; in (seed, member) order."""
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
        observation, info = envs[k].reset(seed=s)
        agent.reset(s, slot=k)
        slots[k] = {"index": upcoming, "observation": observation, "candidates": info["candidates"],
                    "rng": np.random.default_rng([episode_seed, s, m]), "explore": explore_of(m, options)}
        upcoming += 1

    for k in range(len(envs)):
        start(k)
    while any(slot is not None for slot in slots):
        active = [k for k, slot in enumerate(slots) if slot is not None]
        questions = [agent.question(slots[k]["observation"], slots[k]["candidates"], k) for k in active]
        for k, question, decision in zip(active, questions, scorer.decide_many(questions)):
            slot = slots[k]
            candidates = slot["candidates"]
            index = sample(decision.corrected, temperature, slot["explore"], slot["rng"])
            agent.record(candidates.texts[index], k)
            episode = played[slot["index"]]
            episode.decisions.append(Question(context=question.context, candidates=question.candidates,
                                              labels=question.labels, images=question.images, gold=index))
            observation, reward, terminated, truncated, info = envs[k].step(candidates.actions[index])
            episode.rewards.append(float(reward))
            if terminated or truncated:
                episode.success = success_of(info, reward)
                start(k)
            else:
                slot["observation"], slot["candidates"] = observation, info["candidates"]
    return played


def sample(scores: Sequence[float], temperature: float, explore: float, rng: np.random.Generator) -> int:
    """A draw from softmax(scores / temperature) mixed with weight `explore` with the uniform distribution."""
    scaled = np.array(scores, dtype=np.float64) / temperature
    q = np.exp(scaled - scaled.max())
    p = (1 - explore) * q / q.sum() + explore / len(q)
    return int(rng.choice(len(p), p=p / p.sum()))


def keep_group(episodes: Sequence[Played], keep: str) -> list[Played]:
    """The episodes of one group (one seed) that `keep` selects (see the module notes)."""
    returns = [e.total for e in episodes]
    if max(returns) == min(returns):
        return []
    successes = {e.success for e in episodes}
    if keep == "success" or (keep == "auto" and len(successes) > 1):
        return [e for e in episodes if e.success]
    fraction = 0.25 if keep == "auto" else float(keep.split(":", 1)[1])
    threshold = sorted(returns, reverse=True)[max(1, math.ceil(fraction * len(returns))) - 1]
    return [e for e in episodes if e.total >= threshold and e.total > min(returns)]


def kept_episodes(played: Sequence[Played], keep: str) -> list[Played]:
    """`keep_group` over every seed's group."""
    groups: dict[int, list[Played]] = {}
    for episode in played:
        groups.setdefault(episode.seed, []).append(episode)
    return [e for group in groups.values() for e in keep_group(group, keep)]


def loop_erased(episode: Played) -> list[Question]:
    """The episode's decisions, each distinct question once, with the action of its last visit."""
    last: dict[bytes, Question] = {}
    for decision in episode.decisions:
        key = question_key(Question(context=decision.context, candidates=decision.candidates,
                                    labels=decision.labels, images=decision.images))
        last.pop(key, None)
        last[key] = decision
    return list(last.values())


class Pool:
    """The kept decisions cloned each round: distinct (question, action) pairs, the `size` most recent."""

    def __init__(self, size: int, rows: Sequence[dict] = ()):
        self.size = size
        self.items: OrderedDict[bytes, Question] = OrderedDict()
        self.add(question_from_row(row) for row in rows)

    def add(self, decisions) -> int:
        """Add decisions (a repeated one moves to the newest end); returns how many were new."""
        new = 0
        for decision in decisions:
            key = question_key(decision)
            new += key not in self.items
            self.items.pop(key, None)
            self.items[key] = decision
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return new

    def questions(self) -> list[Question]:
        return list(self.items.values())

    def rows(self) -> list[dict]:
        """The pool as JSON rows (checkpoints)."""
        return [{"context": q.context, "candidates": list(q.candidates), "labels": list(q.labels or ()),
                 "gold": q.gold} for q in self.items.values()]


def question_from_row(row: dict) -> Question:
    return Question(context=row["context"], candidates=row["candidates"], labels=row["labels"] or None,
                    gold=row["gold"])


def nothing_kept(steps: int, episodes: int, best: float | None, keep: str, any_success_signal: bool) -> str:
    """The one-line message of a budget that ended with nothing ever kept."""
    said = (f"algorithm=rft kept no episode in {steps} env steps ({episodes} episodes, best return "
            f"{'none' if best is None else f'{best:g}'}): ")
    if keep == "success" and not any_success_signal:
        return said + ("the env reported no info['is_success'] and no episode ended on a positive reward, so "
                       "train.keep=success keeps nothing; use train.keep=auto or train.keep=top:0.25")
    return said + ("every group of train.group episodes had one return; raise train.env_steps, train.group or "
                   "train.explore")
