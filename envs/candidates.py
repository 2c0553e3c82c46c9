"""`CandidateActions`: a Gymnasium wrapper that puts the action texts in `info["candidates"]`.

It sits on any env with a `Discrete` action space; observations, rewards and actions pass through
untouched. The texts come from the argument or from the env's `controls` (objects with `label` and
`text`, as `jetgym.envs.vizdoom.CONTROLS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gymnasium as gym
from gymnasium import spaces


@dataclass(frozen=True)
class CandidateSet:
    """The admissible actions as texts: candidate i is `texts[i]` (id `labels[i]`) and means env action `actions[i]`."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    actions: tuple[int, ...]

    def __post_init__(self):
        for name in ("texts", "labels", "actions"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.texts:
            raise ValueError("a candidate set needs at least one candidate")
        if not len(self.texts) == len(self.labels) == len(self.actions):
            raise ValueError("candidate texts, labels and actions must match one to one")
        if any(not isinstance(t, str) or not t for t in self.texts):
            raise ValueError(f"every candidate text must be a non-empty string, got {list(self.texts)}")
        if len(set(self.texts)) != len(self.texts) or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"candidate texts and labels must be distinct, got {list(self.texts)} / {list(self.labels)}")


class CandidateActions(gym.Wrapper):
    """Adds `info["candidates"]` (a `CandidateSet`) on reset and on every step."""

    def __init__(self, env: gym.Env, texts: Sequence[str] | None = None, labels: Sequence[str] | None = None):
        super().__init__(env)
        if not isinstance(env.action_space, spaces.Discrete):
            raise TypeError(f"CandidateActions needs a Discrete action space, got {env.action_space}")
        n, start = int(env.action_space.n), int(env.action_space.start)
        controls = getattr(env.unwrapped, "controls", None)
        if texts is None:
            if controls is None:
                raise ValueError("pass texts=[...] (one per action): the env has no `controls` to read them from")
            texts = [c.text for c in controls]
            labels = [c.label for c in controls] if labels is None else labels
        labels = [str(i) for i in range(n)] if labels is None else labels
        if len(texts) != n:
            raise ValueError(f"{len(texts)} candidate texts for {n} actions")
        self.candidates = CandidateSet(tuple(texts), tuple(labels), tuple(range(start, start + n)))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "candidates": self.candidates}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "candidates": self.candidates}
