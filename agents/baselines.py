"""Baselines for the same runner: `random` and `scripted`."""

from __future__ import annotations

import numpy as np

from .base import AGENTS, Act
from .perception import find_blobs


def _act(candidates, index: int) -> Act:
    return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index])


@AGENTS.register("random")
class RandomAgent:
    """Uniform over the candidates, seeded per episode."""

    def __init__(self):
        self.rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation, candidates) -> Act:
        return _act(candidates, int(self.rng.integers(len(candidates.texts))))


@AGENTS.register("scripted")
class ScriptedAgent:
    """A small hand-written policy on the same pixel features as `perception=describe`:

    something in the crosshair -> `attack` (or `move forward` when the status shows no ammo counter,
    e.g. health gathering); otherwise turn toward the largest thing seen; nothing seen -> keep turning
    the way it last turned (left at first; `move forward` without an ammo counter). Deterministic.
    """

    def __init__(self):
        self.turn = "turn_left"

    def reset(self, seed: int | None = None) -> None:
        self.turn = "turn_left"

    def act(self, observation, candidates) -> Act:
        labels = list(candidates.labels)
        shooter = "ammo" in observation["status"]
        blobs = find_blobs(observation["screen"])
        if any(b.in_crosshair for b in blobs):
            label = "attack" if shooter and int(observation["status"]["ammo"]) > 0 else "move_forward"
        elif blobs:
            label = self.turn = "turn_left" if blobs[0].x < 0.5 else "turn_right"
        else:
            label = self.turn if shooter else "move_forward"
        return _act(candidates, labels.index(label))
