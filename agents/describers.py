"""Describers: one observation in, the text a language model reads about it out.

A describer is any callable `describe(observation) -> str` (one or more lines). `make_describer(spec, ...)`
returns one for an observation space:
- a callable is used as it is;
- a registered name (`DESCRIBERS`) builds that describer for the space (a clear error when it does not fit);
- `auto` (default) takes, in order: the env's own `describe(observation)` method (on the env or any wrapper),
  then the first registered describer that fits the space and the env, env-specific ones first: `doom`,
  `frozenlake`, `taxi`, `cliffwalking`, `cartpole`, `minigrid` (`jetgym.agents.describers_minigrid`), then the
  generic `image`, `discrete`, `box`, `multi_discrete`, `multi_binary`, `text`, `tuple`, `dict`.

Generic describers print numbers with `digits` significant digits (`-0.47` stays `-0.47`, integers stay
integers), name the components of a `Box` when the env documents them (an `observation_names` attribute on the
env, or the table `COMPONENT_NAMES` for Gymnasium's classic-control and Box2D ids), and send image observations
to the ViZDoom screen sentence, `jetgym.envs.vizdoom.perception.describe` (`perception="describe"`), or, for
vision-language models, to the question's image (`screenshot=True` on the agent). Nothing but the observation (and fixed env facts such as the
map of FrozenLake) is read.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from jetgym.scorers.registry import Registry
from jetgym.envs.numbers import number_text

Describe = Callable[[Any], str]
MAX_NUMBERS = 64  # a Box with more numbers than this (and not an image) needs a describer of its own

# Documented observation components of Gymnasium ids (https://gymnasium.farama.org/environments/...).
COMPONENT_NAMES: dict[str, tuple[str, ...]] = {
    "CartPole": ("cart position", "cart velocity", "pole angle", "pole angular velocity"),
    "MountainCar": ("position", "velocity"),
    "MountainCarContinuous": ("position", "velocity"),
    "Pendulum": ("cos(angle)", "sin(angle)", "angular velocity"),
    "Acrobot": (
        "cos(theta1)",
        "sin(theta1)",
        "cos(theta2)",
        "sin(theta2)",
        "theta1 angular velocity",
        "theta2 angular velocity",
    ),
    "LunarLander": (
        "x",
        "y",
        "x velocity",
        "y velocity",
        "angle",
        "angular velocity",
        "left leg contact",
        "right leg contact",
    ),
}


@dataclass(frozen=True)
class DescriberEntry:
    """build(space, env, perception, digits) -> describe; fits(space, env) -> whether `auto` may pick it."""

    build: Callable[..., Describe]
    fits: Callable[[Any, Any], bool]


DESCRIBERS: Registry[DescriberEntry] = Registry("describer")
_AUTO_ORDER: list[str] = []
_GENERIC: set[str] = set()


def register_describer(name: str, fits: Callable[[Any, Any], bool], generic: bool = False):
    """Decorator on a builder `build(space, env=None, perception="describe", digits=4) -> describe`.
    `auto` tries env-specific describers (generic=False) before the generic ones, each kind in registration order."""

    def decorator(build):
        DESCRIBERS.add(name, DescriberEntry(build, fits))
        first_generic = next((i for i, other in enumerate(_AUTO_ORDER) if other in _GENERIC), len(_AUTO_ORDER))
        _AUTO_ORDER.insert(len(_AUTO_ORDER) if generic else first_generic, name)
        if generic:
            _GENERIC.add(name)
        return build

    return decorator


def available_describers() -> list[str]:
    return ["auto", *DESCRIBERS.names()]


# --- numbers and values ------------------------------------------------------------------------------------
def array_text(values, digits: int = 4, names=None) -> str:
    """`[0.1, -0.47]`, or `name 0.1, other -0.47` when the components are named."""
    flat = np.asarray(values).reshape(-1)
    parts = [number_text(v, digits) for v in flat]
    if names is not None and len(names) == len(parts):
        return ", ".join(f"{name} {part}" for name, part in zip(names, parts))
    if np.asarray(values).ndim == 0:
        return parts[0]
    return (
        "[" + ", ".join(parts) + "]"
        if np.asarray(values).ndim == 1
        else str(
            np.array2string(np.asarray(values), separator=", ", formatter={"all": lambda v: number_text(v, digits)})
        )
    )


def is_image(space) -> bool:
    """An (H, W, 3) or (H, W) uint8 Box of at least 8x8: what cameras and screens give."""
    from gymnasium import spaces

    if not isinstance(space, spaces.Box) or space.dtype != np.uint8:
        return False
    shape = space.shape
    return (len(shape) == 3 and shape[2] in (1, 3, 4) and min(shape[:2]) >= 8) or (len(shape) == 2 and min(shape) >= 8)


def infer_space(observation):
    """A Gymnasium space shaped like `observation`, for agents built without one (describing only)."""
    from gymnasium import spaces

    if isinstance(observation, dict):
        return spaces.Dict({key: infer_space(value) for key, value in observation.items()})
    if isinstance(observation, tuple):
        return spaces.Tuple(tuple(infer_space(value) for value in observation))
    if isinstance(observation, str):
        return spaces.Text(max_length=max(len(observation), 1))
    if isinstance(observation, (bool, np.bool_, int, np.integer)):
        return spaces.Discrete(max(int(observation) + 1, 1))
    array = np.asarray(observation)
    if array.dtype == np.uint8:
        return spaces.Box(0, 255, array.shape, np.uint8)
    if array.dtype.kind in "iu":
        return spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, array.shape, np.int64)
    if array.dtype.kind == "f":
        return spaces.Box(-np.inf, np.inf, array.shape, array.dtype)
    raise TypeError(
        f"cannot tell which observation space {type(observation).__name__} values come from: "
        "pass observation_space= or env= to the agent, or describer=<callable>"
    )


def _no_fit(space, name: str | None = None) -> str:
    which = f"describer {name!r} does not fit" if name else "no describer fits"
    size = int(np.prod(space.shape)) if type(space).__name__ == "Box" and space.shape is not None else 0
    why = f" ({size} numbers are too many to read out)" if size > MAX_NUMBERS and not is_image(space) else ""
    return (
        f"{which} the observation space {space}{why}: pass describer=<callable(observation) -> str> (or register "
        f"one with jetgym.agents.describers.register_describer), give the env a describe(observation) method, "
        f"or wrap it so the observation is Discrete/Box/MultiDiscrete/MultiBinary/Text/Tuple/Dict "
        f"(images: perception=describe or screenshot=true with a vision-language model); "
        f"describers: {', '.join(available_describers())}"
    )


def value_text(space, value, perception: str = "describe", digits: int = 4, names=None) -> str:
    """The generic rendering of one value of `space` (recursive for Tuple and Dict)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return number_text(value)
    if is_image(space):
        if perception != "describe":
            raise ValueError(
                f"an image observation {space} needs perception=describe (a sentence from its pixels) "
                "or screenshot=true with a vision-language model"
            )
        from jetgym.envs.vizdoom.perception import describe

        return describe(_rgb(np.asarray(value)))
    if isinstance(space, spaces.Box):
        if int(np.prod(space.shape)) > MAX_NUMBERS:
            raise ValueError(_no_fit(space))
        return array_text(value, digits, names)
    if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
        return array_text(value, digits)
    if isinstance(space, spaces.Text):
        return str(value)
    if isinstance(space, spaces.Tuple):
        return "(" + ", ".join(value_text(s, v, perception, digits) for s, v in zip(space.spaces, value)) + ")"
    if isinstance(space, spaces.Dict):
        parts = []
        for key, sub in space.spaces.items():
            text = value_text(sub, value[key], perception, digits)
            parts.append(f"{key} ({text})" if isinstance(sub, (spaces.Dict,)) else f"{key} {text}")
        return ", ".join(parts)
    raise ValueError(_no_fit(space))


def _rgb(array: np.ndarray) -> np.ndarray:
    if array.ndim == 2:
        return np.repeat(array[:, :, None], 3, axis=2)
    if array.shape[2] == 1:
        return np.repeat(array, 3, axis=2)
    return array[:, :, :3]


def _describable(space) -> bool:
    """Whether `value_text` can render every part of the space."""
    from gymnasium import spaces

    if isinstance(space, spaces.Tuple):
        return all(_describable(s) for s in space.spaces)
    if isinstance(space, spaces.Dict):
        return all(_describable(s) for s in space.spaces.values())
    if isinstance(space, spaces.Box):
        return is_image(space) or int(np.prod(space.shape)) <= MAX_NUMBERS
    return isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Text))


# --- env facts (single or vector env) -----------------------------------------------------------------------
_PROBES: weakref.WeakKeyDictionary | None = None  # vector env -> a single env of the same id (async vector envs)


def representative(env):
    """A single env standing for `env`: itself, the first sub-env of a SyncVectorEnv, or, for other vector envs
    (AsyncVectorEnv keeps its sub-envs in other processes), a fresh `gymnasium.make` of the same id and kwargs
    (wrappers of the sub-envs are not on it)."""
    global _PROBES
    if env is None or not hasattr(env, "num_envs"):
        return env
    if getattr(env, "envs", None):
        return env.envs[0]
    import gymnasium

    if _PROBES is None:
        _PROBES = weakref.WeakKeyDictionary()
    if env not in _PROBES:
        spec = getattr(env, "spec", None)
        if spec is None:
            return None
        kwargs = {
            k: v
            for k, v in spec.kwargs.items()
            if k not in ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
        }
        _PROBES[env] = gymnasium.make(spec.id, **kwargs)
    return _PROBES[env]


def env_attr(env, name: str, default=None):
    """An attribute of the env (a vector env: of its `representative`), through wrappers; `default` if none."""
    env = representative(env)
    if env is None:
        return default
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return getattr(getattr(env, "unwrapped", env), name, default)


def env_family(env) -> str:
    """`Taxi` for `Taxi-v4` (the id without namespace and version); '' without a spec."""
    spec = getattr(representative(env), "spec", None)
    if spec is None or not getattr(spec, "id", None):
        return ""
    return spec.id.split("/")[-1].rsplit("-v", 1)[0]


def component_names(env, space) -> Optional[tuple[str, ...]]:
    names = env_attr(env, "observation_names") or COMPONENT_NAMES.get(env_family(env))
    if names is not None and int(np.prod(getattr(space, "shape", ()) or (1,))) == len(names):
        return tuple(names)
    return None


def _line(text: str) -> str:
    text = text.strip()
    return f"Observation: {text}" + ("" if text.endswith((".", "!", "?")) else ".")


# --- env-specific describers (registered first: `auto` tries them before the generic ones) -------------------
def _is_doom(space, env) -> bool:
    from gymnasium import spaces

    return isinstance(space, spaces.Dict) and {"screen", "status"} <= set(space.spaces)


@register_describer("doom", _is_doom)
def doom(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """`Status: health 100, ammo 26, kills 0.` and, with perception=describe, the pixel sentence of the screen
    (`jetgym.envs.vizdoom.text`)."""
    from jetgym.envs.vizdoom.text import observation_text

    return lambda observation: observation_text(observation, perception)


TILES = {"S": "start", "F": "frozen", "H": "hole", "G": "goal"}


def _is_family(family: str):
    def fits(space, env) -> bool:
        from gymnasium import spaces

        return isinstance(space, spaces.Discrete) and env_family(env) == family

    return fits


@register_describer("frozenlake", _is_family("FrozenLake"))
def frozenlake(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """Where the player stands on the (fixed) map and what the four neighbouring tiles are."""
    desc = env_attr(env, "desc")
    if desc is None:
        raise ValueError("describer 'frozenlake' reads the map from the env (its `desc`): pass env=")
    rows = ["".join(c.decode() if isinstance(c, bytes) else str(c) for c in row) for row in np.asarray(desc)]
    nrow, ncol = len(rows), len(rows[0])

    def tile(r: int, c: int) -> str:
        return TILES.get(rows[r][c], rows[r][c]) if 0 <= r < nrow and 0 <= c < ncol else "edge"

    def text(observation) -> str:
        r, c = divmod(int(observation), ncol)
        grid = "\n".join(
            "".join("X" if (i, j) == (r, c) else ch for j, ch in enumerate(row)) for i, row in enumerate(rows)
        )
        around = ", ".join(
            f"{name} {tile(r + dr, c + dc)}"
            for name, (dr, dc) in (("left", (0, -1)), ("down", (1, 0)), ("right", (0, 1)), ("up", (-1, 0)))
        )
        return (
            f"Map (X you, S start, F frozen, H hole, G goal):\n{grid}\n"
            f"You are at row {r}, column {c} (from the top left, counting from 0) on a {tile(r, c)} tile. "
            f"Next to you: {around}."
        )

    return text


TAXI_STOPS = (("R", 0, 0), ("G", 0, 4), ("Y", 4, 0), ("B", 4, 3))


def _offset(dr: int, dc: int, words: tuple[str, str, str, str] = ("north", "south", "west", "east")) -> str:
    """`2 rows south and 1 column east` (`words`: the names of row -, row +, column -, column +)."""
    parts = []
    if dr:
        parts.append(f"{abs(dr)} {'row' if abs(dr) == 1 else 'rows'} {words[dr > 0]}")
    if dc:
        parts.append(f"{abs(dc)} {'column' if abs(dc) == 1 else 'columns'} {words[2 + (dc > 0)]}")
    return " and ".join(parts) if parts else "right here"


def _from_taxi(dr: int, dc: int) -> str:
    """`2 rows south of the taxi`, or `at the taxi`."""
    return f"{_offset(dr, dc)} of the taxi" if dr or dc else "at the taxi"


@register_describer("taxi", _is_family("Taxi"))
def taxi(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """Taxi position, passenger (at a stop or in the taxi), destination, where they are from the taxi, and the next
    stop (the passenger until picked up, then the destination) with its offset."""

    def text(observation) -> str:
        state = int(observation)  # ((taxi_row * 5 + taxi_col) * 5 + passenger) * 4 + destination (documented)
        destination, state = state % 4, state // 4
        passenger, state = state % 5, state // 5
        row, col = divmod(state, 5)
        name, drow, dcol = TAXI_STOPS[destination]
        lines = [f"The taxi is at row {row}, column {col} of the 5x5 grid (row 0 is north, column 0 is west)."]
        if passenger == 4:
            lines.append("The passenger is in the taxi.")
        else:
            pname, prow, pcol = TAXI_STOPS[passenger]
            lines.append(
                f"The passenger waits at {pname} (row {prow}, column {pcol}): {_from_taxi(prow - row, pcol - col)}."
            )
        lines.append(f"The destination is {name} (row {drow}, column {dcol}): {_from_taxi(drow - row, dcol - col)}.")
        stop, (srow, scol) = ("the destination", (drow, dcol)) if passenger == 4 else ("the passenger", (prow, pcol))
        lines.append(f"Next stop: {stop}, {_offset(srow - row, scol - col)}.")
        return "\n".join(lines)

    return text


SCREEN_WORDS = ("up", "down", "left", "right")  # row -, row +, column -, column +
STEPS = (("up", (-1, 0)), ("right", (0, 1)), ("down", (1, 0)), ("left", (0, -1)))  # CliffWalking's action order


@register_describer("cliffwalking", _is_family("CliffWalking"))
def cliffwalking(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """Where the player stands, where the goal (the bottom right corner) is from there, and what lies one step
    up, right, down and left (open ground, the cliff, the goal, or the edge); the layout is read from the env
    (`shape`, `_cliff`), Gymnasium's 4x12 one without an env."""
    nrow, ncol = env_attr(env, "shape", (4, 12))
    cliff = env_attr(env, "_cliff")
    if cliff is None:
        cliff = np.zeros((nrow, ncol), dtype=bool)
        cliff[nrow - 1, 1:-1] = True
    goal = (nrow - 1, ncol - 1)

    def tile(r: int, c: int) -> str:
        if not (0 <= r < nrow and 0 <= c < ncol):
            return "the edge"
        return "the goal" if (r, c) == goal else "the cliff" if cliff[r, c] else "open ground"

    def text(observation) -> str:
        r, c = divmod(int(observation), ncol)
        around = ". ".join(f"{name.capitalize()}: {tile(r + dr, c + dc)}" for name, (dr, dc) in STEPS)
        return (
            f"You are at row {r}, column {c} of a {nrow}x{ncol} grid (row 0 is the top, column 0 the left). "
            f"The goal is {_offset(goal[0] - r, goal[1] - c, SCREEN_WORDS)}.\n{around}."
        )

    return text


def _is_cartpole(space, env) -> bool:
    from gymnasium import spaces

    return isinstance(space, spaces.Box) and space.shape == (4,) and env_family(env) == "CartPole"


def _graded(value: float, steps: tuple[float, float], words: tuple[str, str, str], sides: tuple[str, str]) -> str:
    """`words[0]` below `steps[0]` in size; else `words[1]` or `words[2]` (above `steps[1]`) with the side of
    the sign put in for `{side}` (`sides`: negative, positive)."""
    size = abs(value)
    if size < steps[0]:
        return words[0]
    return words[1 if size < steps[1] else 2].format(side=sides[value > 0])


@register_describer("cartpole", _is_cartpole)
def cartpole(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """The cart's place and motion and the pole's lean and swing in words, graded coarsely (no numbers: looks-alike
    states read alike, so a rule learnt on some holds on the rest). Gymnasium's signs: positive is right, for
    the pole a lean to the right; the episode ends past 2.4 from the centre or 12 degrees of lean."""
    sides = ("left", "right")

    def text(observation) -> str:
        x, speed, angle, swing = (float(v) for v in np.asarray(observation).reshape(-1))
        place = _graded(x, (0.5, 1.6), ("near the centre", "{side} of the centre", "near the {side} edge"), sides)
        motion = _graded(speed, (0.2, 1.0), ("almost still", "moving {side} slowly", "moving {side} fast"), sides)
        lean = _graded(
            math.degrees(angle), (1.0, 5.0), ("stands upright", "leans a little {side}", "leans far {side}"), sides
        )
        falling = _graded(swing, (0.2, 1.0), ("steady", "tipping {side} slowly", "tipping {side} fast"), sides)
        return f"The cart is {place}, {motion}. The pole {lean} and is {falling}."

    return text


# --- generic describers ---------------------------------------------------------------------------------------
def _generic(kind):
    def fits(space, env) -> bool:
        return isinstance(space, kind()) and _describable(space)

    def build(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
        names = component_names(env, space)
        if is_image(space) and perception != "describe":
            value_text(space, None, perception)  # raises the error that names the fix

        def text(observation) -> str:
            if is_image(space):  # already a sentence: `Seen on screen: ...`
                return value_text(space, observation, perception, digits)
            return _line(value_text(space, observation, perception, digits, names))

        return text

    return fits, build


@register_describer("image", lambda space, env: is_image(space), generic=True)
def image(space, env=None, perception: str = "describe", digits: int = 4) -> Describe:
    """The pixel sentence of `jetgym.agents.perception.describe` (perception=describe)."""
    return _generic(lambda: object)[1](space, env, perception, digits)


def _spaces(name):
    def kind():
        from gymnasium import spaces

        return getattr(spaces, name)

    return kind


for _name, _space in (
    ("discrete", "Discrete"),
    ("box", "Box"),
    ("multi_discrete", "MultiDiscrete"),
    ("multi_binary", "MultiBinary"),
    ("text", "Text"),
    ("tuple", "Tuple"),
    ("dict", "Dict"),
):
    _fits, _build = _generic(_spaces(_space))
    register_describer(_name, _fits, generic=True)(_build)


# --- choosing one ---------------------------------------------------------------------------------------------
def make_describer(
    spec: str | Describe = "auto", space=None, env=None, perception: str = "describe", digits: int = 4
) -> Describe:
    """The describer for `space` (default: the env's observation space, or its sub-env's for a vector env)."""
    if callable(spec):
        return spec
    if space is None and env is not None:
        space = getattr(env, "single_observation_space", None) or env.observation_space
    if space is None:
        raise ValueError("make_describer needs the observation space: pass space= or env=")
    if spec == "auto":
        own = env_attr(env, "describe")
        if callable(own):
            return own
        for name in _AUTO_ORDER:
            entry = DESCRIBERS.get(name)
            if entry.fits(space, env):
                return entry.build(space, env=env, perception=perception, digits=digits)
        raise ValueError(_no_fit(space))
    entry = DESCRIBERS.get(spec)
    from gymnasium import spaces

    named_env = spec in ("frozenlake", "taxi", "cliffwalking") and isinstance(
        space, spaces.Discrete
    )  # chosen by hand: any id
    if not (entry.fits(space, env) or named_env):
        raise ValueError(_no_fit(space, spec))
    return entry.build(space, env=env, perception=perception, digits=digits)
