"""Environments and question sets that turn tasks into scorer questions (cheap to import).

When Gymnasium is installed (the `vizdoom` extra), importing this package registers the ViZDoom ids
below; `vizdoom` itself is imported only when one is made.
"""

from __future__ import annotations

import importlib.util

# Gymnasium id -> scenario of envs.vizdoom.SCENARIOS
DOOM_IDS: dict[str, str] = {
    "jetgym/DoomDefendTheCenter-v0": "defend_the_center",
    "jetgym/DoomDeadlyCorridor-v0": "deadly_corridor",
    "jetgym/DoomBasic-v0": "basic",
    "jetgym/DoomHealthGathering-v0": "health_gathering",
}


def register_envs() -> None:
    """Register the jetgym ids with Gymnasium (idempotent)."""
    import gymnasium

    for env_id, scenario in DOOM_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="envs.vizdoom:DoomEnv", kwargs={"scenario": scenario})


if importlib.util.find_spec("gymnasium") is not None:
    register_envs()
