"""The scripted ViZDoom expert, on the same pixel features as the screen sentence (`perception.find_blobs`).

Something in the crosshair -> `attack` (or `move_forward` when the status shows no ammo counter, e.g. health
gathering); otherwise turn toward the largest thing seen (`aim="strafe"`: strafe toward it, which does not
overshoot a target on the far wall as turning does in basic); nothing seen -> keep turning the way it last
turned (left at first; `move_forward` without an ammo counter). Deterministic.
"""

from __future__ import annotations

from typing import Mapping

from .perception import HORIZON, find_blobs

AIMS = ("turn", "strafe")  # how the expert steers toward what it sees


class DoomExpert:
    """`label(observation)` -> the control label to play; remembers the last turn (a new episode: a new expert)."""

    def __init__(self, aim: str = "turn"):
        if aim not in AIMS:
            raise ValueError(f"the scripted agent's aim must be 'turn' or 'strafe', got {aim!r}")
        self.aim = aim
        self.turn = "turn_left"

    def label(self, observation: Mapping) -> str:
        shooter = "ammo" in observation["status"]
        blobs = find_blobs(observation["screen"], horizon=HORIZON)
        if any(b.in_crosshair for b in blobs):
            return "attack" if shooter and int(observation["status"]["ammo"]) > 0 else "move_forward"
        if blobs and self.aim == "strafe":
            return "strafe_left" if blobs[0].x < 0.5 else "strafe_right"
        if blobs:
            self.turn = "turn_left" if blobs[0].x < 0.5 else "turn_right"
            return self.turn
        return self.turn if shooter else "move_forward"
