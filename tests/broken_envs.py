"""Envs with the mistakes a newcomer's env makes; importing this module registers them (as a package would)."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces


class Walk(gym.Env):
    """Two actions, observation 0; each subclass breaks one rule of Gymnasium's API at its third step."""

    observation_space = spaces.Discrete(3)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return 0, 0.0, self.t >= 5, False, {}


class NanReward(Walk):
    def step(self, action):
        observation, _, terminated, truncated, info = super().step(action)
        return observation, float("nan") if self.t == 3 else 0.0, terminated, truncated, info


class OldStep(Walk):
    """The old gym API: step returns (observation, reward, done, info)."""

    def step(self, action):
        observation, reward, terminated, _, info = super().step(action)
        return observation, reward, terminated, info


class RaisingStep(Walk):
    def step(self, action):
        if self.t == 2:
            raise KeyError("wall")
        return super().step(action)


class OddObservation(Walk):
    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return object(), reward, terminated, truncated, info


for name, env in [
    ("NanReward", NanReward),
    ("OldStep", OldStep),
    ("RaisingStep", RaisingStep),
    ("OddObservation", OddObservation),
]:
    if f"Broken{name}-v0" not in gym.registry:
        gym.register(f"Broken{name}-v0", entry_point=env, disable_env_checker=True)
