"""The `minigrid` describer: MiniGrid / BabyAI's egocentric partial view as text relative to the agent.

API (also for training code): `describe_view(observation) -> str` takes one MiniGrid observation, a dict with
`image` (the agent's k x k view, k odd, 7 by default: one (object, colour, state) triple per cell, indexed
`image[x, y]`, the agent at `x = k // 2`, `y = k - 1`, facing `y = 0`), `direction` (0 east, 1 south, 2 west,
3 north) and `mission` (a string), and returns lines such as

    Mission: go to the red ball.
    You face east. You carry nothing.
    Named in the mission: the red ball 2 steps ahead and 1 to the left.
    You see: a wall right in front; a red ball 2 steps ahead and 1 to the left; a closed yellow door on the right.

The third line finds each object the mission names (`the red ball`, `a key`, `the blue door`) in the view, the
nearest match, so a policy can read where its target is without matching names across lines; it says `not in
view` for one the view does not hold and `carried` for the one the agent holds.

Only what the view holds is said, never the full map: every visible object (keys, balls, boxes, doors, goals,
lava), nearest first (at most `max_items`), and of the walls only the nearest one straight ahead, to the left and
to the right. `cell_place(ahead, across)` is the wording of one place ("2 steps ahead and 1 to the left").
`make_describer("auto", env=...)` picks it for any observation space shaped like MiniGrid's (registered as
`minigrid`); the standard action texts are `jetgym.envs.minigrid.ACTION_TEXTS`. The encoding tables below are
MiniGrid's (`minigrid.core.constants`, checked by the tests); minigrid itself is not imported here.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .describers import Describe, register_describer

OBJECTS = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
COLOURS = ("red", "green", "blue", "purple", "yellow", "grey")
DOOR_STATES = ("open", "closed", "locked")
DIRECTIONS = ("east", "south", "west", "north")
SILENT = {"unseen", "empty", "floor", "agent"}  # cells that say nothing
MAX_ITEMS = 12
NAMED = re.compile(r"\b(?:the|a|an)\s+(?:(red|green|blue|purple|yellow|grey)\s+)?(ball|box|key|door)\b")


def cell_place(ahead: int, across: int) -> str:
    """Where a cell is from the agent: `ahead` cells forward, `across` cells to the right (negative: left)."""
    side, n = ("left" if across < 0 else "right"), abs(across)
    if across == 0:
        return "right in front" if ahead == 1 else f"{ahead} steps ahead"
    if ahead == 0:
        return f"on the {side}" if n == 1 else f"{n} steps to the {side}"
    return f"{ahead} {'step' if ahead == 1 else 'steps'} ahead and {n} to the {side}"


def thing_text(obj: int, colour: int, state: int) -> str:
    """`a red ball`, `a locked yellow door`, `a wall`, `lava`, `the green goal square`."""
    name = OBJECTS[obj] if 0 <= obj < len(OBJECTS) else f"object {obj}"
    colour_name = COLOURS[colour] if 0 <= colour < len(COLOURS) else f"colour {colour}"
    if name == "wall":
        return "a wall"
    if name == "lava":
        return "lava"
    if name == "goal":
        return "the green goal square" if colour_name == "green" else f"the {colour_name} goal square"
    if name == "door":
        door_state = DOOR_STATES[state] if 0 <= state < len(DOOR_STATES) else f"state {state}"
        return f"an {door_state} {colour_name} door" if door_state == "open" else f"a {door_state} {colour_name} door"
    return f"a {colour_name} {name}"


def describe_view(observation: Any, max_items: int = MAX_ITEMS) -> str:
    """The mission, heading, what the agent carries and what it sees, relative to itself (see the module notes)."""
    image = np.asarray(observation["image"])
    if image.ndim != 3 or image.shape[0] != image.shape[1] or image.shape[0] % 2 == 0 or image.shape[2] != 3:
        raise ValueError(
            f"describer 'minigrid' needs observation['image'] of shape (k, k, 3) with k odd, got {image.shape}"
        )
    size = image.shape[0]
    me_x, me_y = size // 2, size - 1
    direction = int(np.asarray(observation["direction"]).item())
    lines = [f"Mission: {str(observation['mission']).strip().rstrip('.')}."]
    held = image[me_x, me_y]
    carried = OBJECTS[held[0]] if 0 <= held[0] < len(OBJECTS) else ""
    carry = "nothing" if carried in SILENT or not carried else thing_text(*map(int, held))
    heading = DIRECTIONS[direction] if 0 <= direction < 4 else f"direction {direction}"
    lines.append(f"You face {heading}. You carry {carry}.")
    things: list[tuple[int, int, int, str]] = []  # (distance, ahead, across, text)
    nearest_wall: dict[str, tuple[int, int, int]] = {}  # line -> (distance, ahead, across)
    for x in range(size):
        for y in range(size):
            if (x, y) == (me_x, me_y):
                continue
            obj, colour, state = (int(v) for v in image[x, y])
            name = OBJECTS[obj] if 0 <= obj < len(OBJECTS) else "other"
            if name in SILENT:
                continue
            ahead, across = me_y - y, x - me_x
            if name == "wall":  # only the nearest wall on each of the three lines through the agent
                line = "ahead" if across == 0 else (("left" if across < 0 else "right") if ahead == 0 else None)
                distance = ahead + abs(across)
                if line is not None and (line not in nearest_wall or distance < nearest_wall[line][0]):
                    nearest_wall[line] = (distance, ahead, across)
                continue
            things.append((ahead + abs(across), ahead, across, thing_text(obj, colour, state)))
    things += [(distance, ahead, across, "a wall") for distance, ahead, across in nearest_wall.values()]
    things.sort(key=lambda t: (t[0], abs(t[2]), t[2]))  # nearest first; at equal distance the straighter
    named = named_places(str(observation["mission"]), things, carry)
    if named:
        lines.append(f"Named in the mission: {named}.")
    if things:
        lines.append(
            "You see: "
            + "; ".join(f"{text} {cell_place(ahead, across)}" for _, ahead, across, text in things[:max_items])
            + "."
        )
    else:
        lines.append("You see nothing but empty floor.")
    return "\n".join(lines)


def named_places(mission: str, things: list[tuple[int, int, int, str]], carry: str) -> str:
    """`the red ball 2 steps ahead and 1 to the left; a key, not in view`: where the nearest visible match of each
    object the mission names is (`things`: (distance, ahead, across, text), nearest first)."""
    said = []
    for colour, kind in dict.fromkeys(NAMED.findall(mission)):
        name = f"{colour} {kind}" if colour else kind
        wanted = re.compile(rf"\b{colour}\s+{kind}$" if colour else rf"\b{kind}$")
        seen = (cell_place(a, x) for _, a, x, text in things if wanted.search(text))
        place = "carried" if wanted.search(carry) else next(seen, None)
        said.append(f"the {name}, {place or 'not in view'}" if place in (None, "carried") else f"the {name} {place}")
    return "; ".join(said)


def fits_minigrid(space, env) -> bool:
    """A Dict with `image` (k, k, 3), `direction` Discrete(4) and `mission`: MiniGrid's observation space."""
    from gymnasium import spaces

    if not isinstance(space, spaces.Dict) or not {"image", "direction", "mission"} <= set(space.spaces):
        return False
    image, direction = space["image"], space["direction"]
    shape = getattr(image, "shape", None) or ()
    return (
        len(shape) == 3
        and shape[0] == shape[1]
        and shape[0] % 2 == 1
        and shape[2] == 3
        and isinstance(direction, spaces.Discrete)
        and int(direction.n) == 4
    )


@register_describer("minigrid", fits_minigrid)
def minigrid(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """`describe_view` (the observation only)."""
    return describe_view
