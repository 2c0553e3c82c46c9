"""A small text game for the tests; importing this module registers `TextRooms-v0` (a package that registers
on import, as third-party env packages do).

Three rooms in a row: the hall (0), the corridor (1), the vault (2, where the key lies). The admissible commands
change with the room; `take key` in the vault wins (reward 1). 12 steps at most.

`quiet_end=True`: the step that ends the episode (the win, or the last of the game's own `moves`) lists no
command, as games that are over do; `moves`: the game's own move limit (it truncates there)."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

CHARS = string.ascii_letters + string.digits + " .,'"
COMMANDS = {0: ["go north", "look"], 1: ["go north", "go south", "look"], 2: ["take key", "go south", "look"]}
ROOMS = {
    0: "You are in the hall. A corridor leads north.",
    1: "You are in a corridor. The hall is south, a vault north.",
    2: "You are in the vault. A key lies on the floor. The corridor is south.",
}


class TextRooms(gym.Env):
    def __init__(self, quiet_end: bool = False, moves: int | None = None):
        self.observation_space = spaces.Text(200, charset=CHARS)
        self.action_space = spaces.Text(40, charset=CHARS)
        self.room, self.moved, self.quiet_end, self.moves = 0, 0, quiet_end, moves

    def _info(self, over: bool = False) -> dict:
        return {"admissible_commands": [] if over and self.quiet_end else list(COMMANDS[self.room])}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.room, self.moved = 0, 0
        return ROOMS[0], self._info()

    def step(self, action):
        if action not in COMMANDS[self.room]:
            raise ValueError(f"{action!r} is not admissible in room {self.room}")
        if action == "go north":
            self.room += 1
        elif action == "go south":
            self.room -= 1
        self.moved += 1
        won = action == "take key"
        out = not won and self.moves is not None and self.moved >= self.moves
        return (
            ("You take the key. You win." if won else ROOMS[self.room]),
            float(won),
            won,
            out,
            self._info(won or out),
        )


if "TextRooms-v0" not in gym.registry:
    gym.register("TextRooms-v0", entry_point=TextRooms, max_episode_steps=12)


COLOURS = ("red", "blue", "green", "amber", "grey", "violet", "white", "black", "golden", "teal", "pink", "brown")
KINDS = ("kitchen", "library", "cellar", "chapel", "attic", "gallery", "study", "pantry", "armoury", "greenhouse")
DECOR = (
    "a dusty rug",
    "a broken clock",
    "a tall mirror",
    "an empty cage",
    "a pile of books",
    "a cold stove",
    "a rusty sword",
    "a faded map",
    "a cracked vase",
    "a stuffed owl",
)
WAYS = ("north", "east", "south", "west")


class FreshRooms(gym.Env):
    """Rooms drawn afresh at every step (colour, kind, decor, exits), so questions hardly ever repeat. A sign points
    at a random exit; the way on is the exit the draught comes from. `depth` right exits in a row win (reward 1);
    a wrong one ends the episode."""

    def __init__(self, depth: int = 3):
        self.observation_space = spaces.Text(300, charset=CHARS)
        self.action_space = spaces.Text(40, charset=CHARS)
        self.depth = depth

    def _room(self) -> tuple[str, dict]:
        rng = self.np_random
        exits = sorted(rng.choice(len(WAYS), size=int(rng.integers(2, 4)), replace=False).tolist())
        self.way = WAYS[int(rng.choice(exits))]
        sign = WAYS[int(rng.choice(exits))]
        text = (
            f"You are in a {COLOURS[rng.integers(len(COLOURS))]} {KINDS[rng.integers(len(KINDS))]} with "
            f"{DECOR[rng.integers(len(DECOR))]}. A sign points {sign}. A draught comes from the {self.way}."
        )
        return text, {"admissible_commands": [f"go {WAYS[e]}" for e in exits]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.passed = 0
        return self._room()

    def step(self, action):
        if action != f"go {self.way}":
            return "A dead end. The game is over.", 0.0, True, False, {"admissible_commands": []}
        self.passed += 1
        if self.passed >= self.depth:
            return "Fresh air: you are out. You win.", 1.0, True, False, {"admissible_commands": []}
        text, info = self._room()
        return text, 0.0, False, False, info


if "FreshRooms-v0" not in gym.registry:
    gym.register("FreshRooms-v0", entry_point=FreshRooms, max_episode_steps=12)
