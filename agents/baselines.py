"""Baselines for the same runner: `random`, `fixed` and `scripted`."""

from __future__ import annotations

import numpy as np

from .base import AGENTS, Act, AgentBase
from .perception import find_blobs


def _act(candidates, index: int) -> Act:
    return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index])


@AGENTS.register("random")
class RandomAgent(AgentBase):
    """Uniform over the (admissible) candidates, seeded per episode and slot."""

    def __init__(self):
        self.rngs: dict[int, np.random.Generator] = {}

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        self.rngs[slot] = np.random.default_rng(seed)

    def act_one(self, observation, candidates, slot: int) -> Act:
        rng = self.rngs.setdefault(slot, np.random.default_rng())
        return _act(candidates, int(rng.integers(len(candidates.texts))))


@AGENTS.register("fixed")
class FixedAgent(AgentBase):
    """Plays one control at every step: `control` is a candidate label or text (e.g. `attack`, `turn left`).

    A control that is not among a step's admissible candidates (masked, or not an action of this env) is an
    error naming the ones that are."""

    def __init__(self, control: str):
        if not isinstance(control, str) or not control.strip():
            raise ValueError(f"the fixed agent needs control=<a candidate label or text>, got {control!r}")
        self.control = control

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        pass

    def act_one(self, observation, candidates, slot: int) -> Act:
        for names in (candidates.labels, candidates.texts):
            if self.control in names:
                return _act(candidates, list(names).index(self.control))
        raise ValueError(f"control {self.control!r} is not an admissible candidate here; admissible: "
                         + ", ".join(f"{label} ({text!r})" for label, text in zip(candidates.labels, candidates.texts)))


@AGENTS.register("scripted")
class ScriptedAgent(AgentBase):
    """A small hand-written policy on the same pixel features as `perception=describe`:

    something in the crosshair -> `attack` (or `move forward` when the status shows no ammo counter,
    e.g. health gathering); otherwise turn toward the largest thing seen; nothing seen -> keep turning
    the way it last turned (left at first; `move forward` without an ammo counter). Deterministic.
    """

    def __init__(self):
        self.turns: dict[int, str] = {}

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        self.turns[slot] = "turn_left"

    def act_one(self, observation, candidates, slot: int) -> Act:
        if not (isinstance(observation, dict) and {"screen", "status"} <= set(observation)):
            raise ValueError("the scripted agent plays ViZDoom only (observation['screen'] and ['status']); "
                             "use agent=scorer or agent=random on other envs")
        labels = list(candidates.labels)
        shooter = "ammo" in observation["status"]
        blobs = find_blobs(observation["screen"])
        if any(b.in_crosshair for b in blobs):
            label = "attack" if shooter and int(observation["status"]["ammo"]) > 0 else "move_forward"
        elif blobs:
            label = self.turns[slot] = "turn_left" if blobs[0].x < 0.5 else "turn_right"
        else:
            label = self.turns.setdefault(slot, "turn_left") if shooter else "move_forward"
        return _act(candidates, labels.index(label))
