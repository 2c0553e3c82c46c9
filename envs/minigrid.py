"""MiniGrid / BabyAI facts jetgym uses (the package itself is imported only by Gymnasium when an env is made).

`pip install 'jetgym[minigrid]'`; the ids register on `import minigrid`, so name the module in the id
(`env.id=minigrid:BabyAI-GoToRedBallGrey-v0`, Gymnasium's `module:EnvId` convention) or in `env.imports`.
API: `ACTION_TEXTS` / `ACTION_LABELS` are the candidate texts and labels of MiniGrid's seven actions in action
order (left, right, forward, pickup, drop, toggle, done); `CandidateActions` uses them for any MiniGrid env
(`is_minigrid`) unless texts are given. The observation is described by `jetgym.agents.describers_minigrid`
(`describe_view`): the agent's own view, relative to it, with the mission; the ready configs
(`conf/env/babyai_*.yaml`, `minigrid_*.yaml`) add a neutral briefing as `env.task`.
"""

from __future__ import annotations

ACTION_LABELS = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
ACTION_TEXTS = ("turn left", "turn right", "move forward", "pick up", "drop", "open", "done")


def is_minigrid(env) -> bool:
    """Whether `env` (through its wrappers) is a MiniGrid env, without importing minigrid."""
    base = getattr(env, "unwrapped", env)
    return any(cls.__module__.split(".")[0] == "minigrid" and cls.__name__ == "MiniGridEnv" for cls in type(base).__mro__)
