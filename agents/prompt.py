"""The text a text-only model sees: the task, the observation as text, recent actions, the candidates.

Everything here is a function of the observation (through a describer, `jetgym.agents.describers`), the
agent's own past choices and the candidate texts; nothing else is read from the env.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .describers import number_text

QUESTION = "What should you do now? Answer with one control."


def status_text(status: Mapping[str, np.ndarray]) -> str:
    """`Status: health 100, ammo 26, kills 0.` in the observation's order (floats keep their decimals)."""
    if not status:
        return "Status: none shown."
    return "Status: " + ", ".join(f"{name} {number_text(np.asarray(value).item())}" for name, value in status.items()) + "."


def recent_text(recent: Sequence[str]) -> str:
    return "Your last actions: " + (", ".join(recent) if recent else "none yet") + "."


def question_text(task: str, observation: str, recent: Sequence[str], candidates: Sequence[str]) -> str:
    """The user message of one decision: task, observation text (one or more lines), recent actions, controls."""
    lines = [task.strip(), observation.strip(), recent_text(recent), "Controls: " + ", ".join(candidates) + ".", QUESTION]
    return "\n".join(line for line in lines if line)
