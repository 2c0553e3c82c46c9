"""A ViZDoom observation as text: the status line (the cfg's game variables) and, optionally, the screen sentence."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from jetgym.envs.numbers import number_text


def status_text(status: Mapping[str, np.ndarray]) -> str:
    """`Status: health 100, ammo 26, kills 0.` in the observation's order (floats keep their decimals)."""
    if not status:
        return "Status: none shown."
    return (
        "Status: "
        + ", ".join(f"{name} {number_text(np.asarray(value).item())}" for name, value in status.items())
        + "."
    )


def observation_text(observation: Mapping, perception: str = "describe") -> str:
    """The status line and, with perception=describe, the pixel sentence of the screen (`perception.describe`)."""
    lines = [status_text(observation["status"])]
    if perception == "describe":
        from .perception import HORIZON, describe

        lines.append(describe(observation["screen"], horizon=HORIZON))
    return "\n".join(lines)
