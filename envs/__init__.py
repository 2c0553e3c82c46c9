"""Gymnasium wrappers and envs that turn tasks into scorer questions (cheap to import).

When Gymnasium is installed, importing this package registers the jetgym ids below (ViZDoom scenarios, TextWorld
games, BabyAI's GoToLocal split by object); `vizdoom`, `textworld` and `minigrid` are imported only when one is
made. Ids of other packages: `module:EnvId` (`split_env_id`) or `env.imports` (`import_env_modules`), checked by
`check_env_id`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util

# Gymnasium id -> scenario of jetgym.envs.vizdoom.env.SCENARIOS
DOOM_IDS: dict[str, str] = {
    "jetgym/DoomDefendTheCenter-v0": "defend_the_center",
    "jetgym/DoomDeadlyCorridor-v0": "deadly_corridor",
    "jetgym/DoomBasic-v0": "basic",
    "jetgym/DoomHealthGathering-v0": "health_gathering",
}


DOOM_ANY_ID = "jetgym/Doom-v0"  # any bundled scenario (env.kwargs.scenario) or a user's cfg (env.kwargs.config)
TEXTWORLD_ID = "jetgym/TextWorld-v0"  # jetgym.envs.textworld.TextWorldEnv: a TextWorld game with text commands
# Gymnasium id -> class of jetgym.envs.babyai_splits (GoToLocal split by the objects its missions name)
BABYAI_SPLIT_IDS: dict[str, str] = {
    "jetgym/BabyAI-GoToLocalTrain-v0": "GoToLocalTrain",
    "jetgym/BabyAI-GoToLocalTest-v0": "GoToLocalTest",
}


def register_envs() -> None:
    """Register the jetgym ids with Gymnasium (idempotent)."""
    import gymnasium

    for env_id, scenario in DOOM_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="jetgym.envs.vizdoom.env:DoomEnv", kwargs={"scenario": scenario})
    if DOOM_ANY_ID not in gymnasium.registry:
        gymnasium.register(DOOM_ANY_ID, entry_point="jetgym.envs.vizdoom.env:DoomEnv")
    if TEXTWORLD_ID not in gymnasium.registry:
        gymnasium.register(TEXTWORLD_ID, entry_point="jetgym.envs.textworld:TextWorldEnv", max_episode_steps=100)
    for env_id, name in BABYAI_SPLIT_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=f"jetgym.envs.babyai_splits:{name}")


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """`minigrid:BabyAI-GoToRedBall-v0` -> ("minigrid", "BabyAI-GoToRedBall-v0"); a plain id -> (None, id).
    Gymnasium's own convention: `gymnasium.make("module:EnvId")` imports the module first."""
    module, sep, name = env_id.partition(":")
    return (module, name) if sep else (None, env_id)


def import_env_modules(modules, field: str = "env.imports") -> None:
    """Import the packages that register Gymnasium ids on import; a clear error naming `field` when one is missing."""
    for module in modules:
        if not isinstance(module, str) or not module.strip():
            raise ValueError(f"{field} must hold package names, got {module!r}")
        try:
            importlib.import_module(module)
        except ImportError as error:
            hint = EXTRAS.get(module.split(".")[0])
            fix = f"pip install 'jetgym[{hint}]'" if hint else f"install the package that provides {module!r}"
            raise ValueError(f"{field}: cannot import {module!r} ({error}): {fix}") from None


# packages that register envs on import -> the jetgym extra that installs them
EXTRAS = {"minigrid": "minigrid", "textworld": "textworld", "vizdoom": "vizdoom"}


def check_env_id(env_id: str, imports=()) -> None:
    """ValueError unless `env_id` (`EnvId` or `module:EnvId`) is a registered Gymnasium id once `imports` (and the
    id's module) are imported; unknown ids get a did-you-mean over every id registered by then."""
    if importlib.util.find_spec("gymnasium") is None:
        raise ValueError(f"env.id {env_id!r} needs Gymnasium: pip install 'jetgym[gym]' (or the vizdoom extra)")
    import gymnasium

    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(
            "env.id is empty: set env.id=<a registered Gymnasium id, EnvId or module:EnvId> "
            "(env=gym is the generic config and names no env)"
        )
    register_envs()
    module, name = split_env_id(env_id)
    import_env_modules(imports)
    if module is not None:
        import_env_modules([module], field=f"env.id {env_id!r}")
    if name not in gymnasium.registry:
        close = difflib.get_close_matches(name, list(gymnasium.registry), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        more = (
            ""
            if module or imports
            else " An env package that registers its ids on import is named in the id "
            "(env.id=<package>:<EnvId>, e.g. minigrid:BabyAI-GoToRedBall-v0) or in env.imports=[<package>]."
        )
        raise ValueError(f"unknown env.id {env_id!r}: not a registered Gymnasium id.{hint}{more}")


if importlib.util.find_spec("gymnasium") is not None:
    register_envs()
