"""A small text game for the tests; importing this module registers `TextRooms-v0` (a package that registers
on import, as third-party env packages do).

Three rooms in a row: the hall (0), the corridor (1), the vault (2, where the key lies). The admissible commands
change with the room; `take key` in the vault wins (reward 1). 12 steps at most."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

CHARS = string.ascii_letters + string.digits + " .,'"
COMMANDS = {0: ["go north", "look"], 1: ["go north", "go south", "look"], 2: ["take key", "go south", "look"]}
ROOMS = {0: "You are in the hall. A corridor leads north.", 1: "You are in a corridor. The hall is south, a vault north.",
         2: "You are in the vault. A key lies on the floor. The corridor is south."}


class TextRooms(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Text(200, charset=CHARS)
        self.action_space = spaces.Text(40, charset=CHARS)
        self.room = 0

    def _info(self) -> dict:
        return {"admissible_commands": list(COMMANDS[self.room])}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.room = 0
        return ROOMS[0], self._info()

    def step(self, action):
        if action not in COMMANDS[self.room]:
            raise ValueError(f"{action!r} is not admissible in room {self.room}")
        if action == "go north":
            self.room += 1
        elif action == "go south":
            self.room -= 1
        won = action == "take key"
        return ("You take the key. You win." if won else ROOMS[self.room]), float(won), won, False, self._info()


if "TextRooms-v0" not in gym.registry:
    gym.register("TextRooms-v0", entry_point=TextRooms, max_episode_steps=12)
