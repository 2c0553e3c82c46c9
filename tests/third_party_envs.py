"""A stand-in for a third-party env package: importing it registers `ThirdPartyLine-v0` (as minigrid does)."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces


class Line(gym.Env):
    """Walk right along a line of 5 cells to the end (reward 1); two actions, no texts of its own."""

    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = spaces.Discrete(length)
        self.action_space = spaces.Discrete(2)
        self.position = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self.position, {}

    def step(self, action):
        self.position = max(0, min(self.length - 1, self.position + (1 if int(action) == 1 else -1)))
        done = self.position == self.length - 1
        return self.position, float(done), done, False, {}


if "ThirdPartyLine-v0" not in gym.registry:
    gym.register("ThirdPartyLine-v0", entry_point=Line, max_episode_steps=30)
