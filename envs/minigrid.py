"""MiniGrid / BabyAI facts jetgym uses (the package itself is imported only by Gymnasium when an env is made).

`pip install 'jetgym[minigrid]'`; the ids register on `import minigrid`, so name the module in the id
(`env.id=minigrid:BabyAI-GoToRedBallGrey-v0`, Gymnasium's `module:EnvId` convention) or in `env.imports`.
API: `ACTION_TEXTS` / `ACTION_LABELS` are the candidate texts and labels of MiniGrid's seven actions in action
order (left, right, forward, pickup, drop, toggle, done); `CandidateActions` uses them for any MiniGrid env
(`is_minigrid`) unless texts are given. The observation is described by `jetgym.agents.describers_minigrid`
(`describe_view`): the agent's own view, relative to it, with the mission; the ready configs
(`conf/env/babyai_*.yaml`, `minigrid_*.yaml`) add a neutral briefing as `env.task`. `BabyAIExpert`: MiniGrid's
own BabyAI bot on one env, the demonstrator of the `scripted` agent there.
"""

from __future__ import annotations

ACTION_LABELS = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
ACTION_TEXTS = ("turn left", "turn right", "move forward", "pick up", "drop", "open", "done")


def is_minigrid(env) -> bool:
    """Whether `env` (through its wrappers) is a MiniGrid env, without importing minigrid."""
    base = getattr(env, "unwrapped", env)
    return any(
        cls.__module__.split(".")[0] == "minigrid" and cls.__name__ == "MiniGridEnv" for cls in type(base).__mro__
    )


class BabyAIExpert:
    """MiniGrid's BabyAI bot (`minigrid.utils.baby_ai_bot.BabyAIBot`) playing one BabyAI env from its reset to the
    end of the episode. The bot plans on the env's full state, not on the agent's view; it is made on the first
    action after a reset (it reads the new mission) and told each action it chose."""

    def __init__(self, env):
        from minigrid.utils.baby_ai_bot import BabyAIBot

        self.bot, self.last = BabyAIBot(env), None

    def action(self) -> int:
        self.last = int(self.bot.replan(self.last))
        return self.last
