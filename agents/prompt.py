"""The text a text-only model sees: status line, perception line, recent actions, controls.

Everything here is a function of the observation (status numbers and screen pixels), the agent's own
past choices and the candidate texts; nothing is read from the engine.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

QUESTION = "What should you do now? Answer with one control."


def status_text(status: Mapping[str, np.ndarray]) -> str:
    """`Status: health 100, ammo 26, kills 0.` in the observation's order."""
    if not status:
        return "Status: none shown."
    return "Status: " + ", ".join(f"{name} {int(value)}" for name, value in status.items()) + "."


def recent_text(recent: Sequence[str]) -> str:
    return "Your last actions: " + (", ".join(recent) if recent else "none yet") + "."


def question_text(task: str, status: Mapping[str, np.ndarray], recent: Sequence[str], candidates: Sequence[str],
                  seen: str | None = None) -> str:
    """The user message of one decision."""
    lines = [task.strip(), status_text(status)]
    if seen is not None:
        lines.append(seen)
    lines += [recent_text(recent), "Controls: " + ", ".join(candidates) + ".", QUESTION]
    return "\n".join(line for line in lines if line)
