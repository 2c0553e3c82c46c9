"""BabyAI GoToLocal split by the objects its missions name: train on some, test on ones never named in training.

`jetgym/BabyAI-GoToLocalTrain-v0` and `jetgym/BabyAI-GoToLocalTest-v0` are MiniGrid's GoToLocal (one 8x8 room,
eight objects, `go to the <colour> <kind>`, 64 steps) whose missions never name (train) or always name (test) one
of `HELD_OUT` objects: the yellow box, the red key and the green ball. These are the GoTo objects GLAM held out of
its BabyAI-MixedTrainLocal training tasks and tested on in MixedTestLocal (Carta et al., 2023); MiniGrid itself has
no such split. Held-out objects may still stand in a training room as distractors, as there. Both are registered
by `jetgym.envs` and need `pip install 'jetgym[minigrid]'`.
"""

from __future__ import annotations

import contextlib
import io

from minigrid.envs.babyai.core.roomgrid_level import RejectSampling
from minigrid.envs.babyai.goto import GoToLocal

HELD_OUT = ("yellow box", "red key", "green ball")


def names_held_out(mission: str) -> bool:
    """Whether a mission names one of the `HELD_OUT` objects."""
    return any(name in mission for name in HELD_OUT)


class _GoToLocalSplit(GoToLocal):
    held_out_missions: bool  # True: only missions naming a held-out object; False: none of them

    def gen_mission(self):
        super().gen_mission()
        if names_held_out(self.instrs.surface(self)) != self.held_out_missions:
            raise RejectSampling("the mission is on the other side of the split")

    def _gen_grid(self, width, height):
        with contextlib.redirect_stdout(io.StringIO()):  # MiniGrid prints every rejected layout
            super()._gen_grid(width, height)


class GoToLocalTrain(_GoToLocalSplit):
    """GoToLocal whose missions never name a `HELD_OUT` object."""

    held_out_missions = False


class GoToLocalTest(_GoToLocalSplit):
    """GoToLocal whose missions always name a `HELD_OUT` object."""

    held_out_missions = True
