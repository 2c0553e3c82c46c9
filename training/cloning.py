"""Behaviour cloning: the questions the scorer agent would have asked along another agent's episodes, each
with the action that agent took as its gold answer (then trained like any labelled set, `run_sft`).

A `steps.jsonl` of `jetgym-episode` (any agent: scripted, random, another model) holds each step's episode,
seed and action label, not the observation. The episodes are replayed: the env is reset with the episode's
seed and stepped with the recorded actions, and at every step the scorer agent's question is built from the
replayed observation, its memory quoting the recorded actions. A replay that departs from the record (another
reward or end, an action that is not admissible) is refused naming the episode and step: cloning needs an env
that replays its episodes from their seeds. A record cut by a shorter time limit than the replay env's is
accepted (a time limit is not part of the env's dynamics).

DAgger (`expert`): the gold of each replayed step is what an expert would do there instead of the recorded
action, while the env still follows the record. Record the clone's own episodes, relabel them with the expert
and clone again on those together with the expert's: the states where the clone goes wrong get labelled.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path

from jetgym.agents.rollout import env_reset, env_step
from jetgym.runs.folder import read_jsonl
from jetgym.scorers import Question

REQUIRED = ("episode", "seed", "step", "action", "reward", "terminated", "truncated")


Paths = str | os.PathLike | Sequence[str | os.PathLike]


def cloning_questions(paths: Paths, env, agent, min_return: float | None = None, expert=None) -> list[Question]:
    """The scorer agent's questions along the episodes of `paths` (one steps.jsonl or several, pooled; replayed
    in `env`, a `CandidateActions` env), gold = the recorded action, or `expert`'s choice on the replayed
    observation (an agent; DAgger). Ids `steps/episode-N/step-S/action` (with several files `steps-K/...`, K the
    file's position); an episode is one group for held-out splits.
    min_return: clone only the episodes whose return (the sum of their recorded rewards) is at least this."""
    files = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    if not files:
        raise ValueError("train.demonstrations is an empty list: give the steps.jsonl of a jetgym-episode run")
    episodes = []
    for k, path in enumerate(files):
        name = "steps" if len(files) == 1 else f"steps-{k}"
        episodes += [(path, f"{name}/episode-{episode}", steps) for episode, steps in _episodes(path)]
    returns = [sum(float(r["reward"]) for r in steps) for _, _, steps in episodes]
    kept = [one for one, total in zip(episodes, returns) if min_return is None or total >= min_return]
    if not kept:
        where = ", ".join(map(str, files))
        raise ValueError(
            f"no episode of {where} has a return of at least train.min_return={min_return} (the best "
            f"has {max(returns):g}): lower train.min_return or record better episodes"
        )
    return [q for path, group, steps in kept for q in _replay(path, env, agent, group, steps, expert)]


def _episodes(path: Path) -> list[tuple[int, list[dict]]]:
    """The episodes of one steps.jsonl, each (episode number, its rows in step order), checked for replay."""
    if not path.is_file():
        raise FileNotFoundError(
            f"train.demonstrations={str(path)!r} is not a file: give the steps.jsonl of a jetgym-episode run"
        )
    rows = read_jsonl(path, what="step")
    if not rows:
        raise ValueError(f"{path} holds no steps: record some episodes with jetgym-episode first")
    for line, row in enumerate(rows, 1):
        missing = [key for key in REQUIRED if key not in row]
        if missing:
            raise ValueError(f"{path}:{line} lacks {', '.join(missing)}: give the steps.jsonl of a jetgym-episode run")
        if row["seed"] is None:
            raise ValueError(
                f"{path}:{line}: episode {row['episode']} has no seed, so it cannot be replayed; "
                f"record the episodes with a seed"
            )
    episodes = [
        (episode, list(steps))
        for episode, steps in groupby(sorted(rows, key=lambda r: (r["episode"], r["step"])), key=lambda r: r["episode"])
    ]
    return _ended(path, episodes)


def _ended(path: Path, episodes: list[tuple[int, list[dict]]]) -> list[tuple[int, list[dict]]]:
    """The episodes whose last step ended them; one cut off (a run stopped mid-episode) is left out, with a word."""
    ended = [(n, steps) for n, steps in episodes if steps[-1]["terminated"] or steps[-1]["truncated"]]
    cut = [f"episode {n} (stops at step {steps[-1]['step']})" for n, steps in episodes if (n, steps) not in ended]
    if cut and not ended:
        raise ValueError(f"{path} holds no finished episode ({', '.join(cut)}): record whole episodes")
    if cut:
        warnings.warn(
            f"{path}: {', '.join(cut)} never ended (the recording run was stopped mid-episode): left out of "
            f"the cloned episodes",
            stacklevel=2,
        )
    return ended


def _replay(path: Path, env, agent, group: str, steps: list[dict], expert=None) -> list[Question]:
    where = f"{path}: episode {steps[0]['episode']}"
    observation, info = env_reset(env, steps[0]["seed"])
    agent.reset(steps[0]["seed"])
    if expert is not None:
        expert.reset(steps[0]["seed"])
    out = []
    for expected, row in enumerate(steps):
        if row["step"] != expected:
            raise ValueError(f"{where} skips from step {expected - 1} to {row['step']}: the file is incomplete")
        candidates = info["candidates"]
        if row["action"] not in candidates.labels:
            raise ValueError(
                f"{where} step {expected}: the recorded action {row['action']!r} is not admissible in "
                f"the replay ({', '.join(candidates.labels)}): is it the same env and settings?"
            )
        index = candidates.labels.index(row["action"])
        gold = index if expert is None else expert.act(observation, candidates).index
        question = agent.question(observation, candidates)
        out.append(
            Question(
                context=question.context,
                candidates=question.candidates,
                labels=question.labels,
                images=question.images,
                gold=gold,
                id=f"{group}/step-{expected}/action",
            )
        )
        agent.record(candidates.texts[index])
        observation, reward, terminated, truncated, info = env_step(env, candidates.actions[index])
        cut = row["truncated"] and not truncated and expected + 1 == len(steps)  # a shorter time limit
        if (
            abs(float(reward) - float(row["reward"])) > 1e-6
            or bool(terminated) != row["terminated"]
            or (bool(truncated) != row["truncated"] and not cut)
        ):
            raise ValueError(
                f"{where} step {expected}: the replay gave reward {float(reward)}, terminated "
                f"{bool(terminated)}, truncated {bool(truncated)} where the file has {row['reward']}, "
                f"{row['terminated']}, {row['truncated']}: the env does not replay this episode from "
                f"its seed (same env and settings?)"
            )
        if (terminated or truncated) and expected + 1 < len(steps):
            raise ValueError(f"{where} ended at step {expected} in the replay but the file goes on")
    return out
