"""Gymnasium wrappers and envs that turn tasks into scorer questions (cheap to import).

When Gymnasium is installed, importing this package registers the jetgym ids below; `vizdoom` itself is
imported only when one is made.
"""

from __future__ import annotations

import difflib
import importlib.util

# Gymnasium id -> scenario of jetgym.envs.vizdoom.SCENARIOS
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
            gymnasium.register(env_id, entry_point="jetgym.envs.vizdoom:DoomEnv", kwargs={"scenario": scenario})


def check_env_id(env_id: str) -> None:
    """ValueError unless `env_id` is a registered Gymnasium id (the jetgym ids included), with a did-you-mean."""
    if importlib.util.find_spec("gymnasium") is None:
        raise ValueError(f"env.id {env_id!r} needs Gymnasium: pip install 'jetgym[gym]' (or the vizdoom extra)")
    import gymnasium

    register_envs()
    if env_id not in gymnasium.registry:
        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown env.id {env_id!r}: not a registered Gymnasium id.{hint}")


if importlib.util.find_spec("gymnasium") is not None:
    register_envs()
