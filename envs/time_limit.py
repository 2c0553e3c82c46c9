"""`StepCap`: the time limit of an env whose registration sets none (`max_episode_steps`), so that no episode of
the command-line jobs runs forever (CliffWalking-v1, for one, ends only at its goal). Envs with an end of their
own (MiniGrid's `max_steps`, ViZDoom's episode timeout) end before the cap and never meet it."""

from __future__ import annotations

import warnings

import gymnasium as gym

from .candidates import env_name

STEP_CAP = 1000  # env steps


class StepCap(gym.Wrapper):
    """Truncate an episode at `steps` env steps, warning (once per message) that the cap, not the env, ended it."""

    def __init__(self, env: gym.Env, steps: int = STEP_CAP):
        super().__init__(env)
        self.steps, self.taken = steps, 0

    def reset(self, **kwargs):
        self.taken = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.taken += 1
        if self.taken >= self.steps and not (terminated or truncated):
            warnings.warn(
                f"{env_name(self.env)} registers no time limit and an episode ran {self.steps} steps: it is "
                f"cut there (truncated); set env.kwargs.max_episode_steps=N for another limit",
                stacklevel=2,
            )
            truncated = True
        return observation, reward, terminated, truncated, info


def needs_cap(env_id: str, kwargs: dict) -> bool:
    """Whether `env_id` (with `kwargs` for gymnasium.make) would have no time limit."""
    import importlib

    from jetgym.envs import split_env_id

    if "max_episode_steps" in kwargs:
        return False
    module, name = split_env_id(env_id)
    try:
        if module:
            importlib.import_module(module)
        return gym.spec(name).max_episode_steps is None
    except Exception:  # an unknown id or module: gymnasium.make names it
        return False
