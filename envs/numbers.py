"""Numbers of an observation as the model reads them (the env texts, e.g. ViZDoom's status line, and the agents'
generic describers)."""

from __future__ import annotations

import numpy as np


def number_text(value, digits: int = 4) -> str:
    """An integer as an integer; a float with `digits` significant digits (`-0.47`, `0.01235`, `1.5e+06`)."""
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not np.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}g}"
