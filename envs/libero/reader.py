"""LIBERO demonstrations: the official HDF5 reader.

Reader. `read_libero(path)` accepts a file in the official LIBERO layout (`data/demo_N/obs/agentview_rgb`,
`eye_in_hand_rgb`, `gripper_states`, `ee_pos`, ...; `actions`, `states`, `rewards`, `dones`; `problem_info`
JSON with `language_instruction`, `bddl_file_name`, `bddl_file_content` on `data`; `model_file` per demo), or a
folder of such files (one per task, as LIBERO ships them). Images are stored upside-down (OpenGL rows
bottom-up); `upright()` reverses the rows. Extras written by `jetgym-render-libero` and used when present:
per-demo `rendered_frames` (the steps whose images are stored), `subgoals` (JSON step texts),
`subgoal_predicates` (JSON: the predicates of each step) and a `labels` group holding the simulator's facts
per step (`grasp`, `hold`, `step_holds`, `goal`; see `jetgym.envs.libero.sim`). The reader only reads;
labels come from those facts (`jetgym.envs.libero.questions`).
"""

from __future__ import annotations

import re

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_KEYS = ("agentview_rgb", "eye_in_hand_rgb")
REQUIRED_OBS = ("gripper_states", "ee_pos")
REQUIRED_DEMO = ("actions",)


class LiberoFormatError(ValueError):
    """A file that is not in the LIBERO layout; the message names the file and the missing part."""


def upright(image: np.ndarray) -> np.ndarray:
    """A stored LIBERO image (OpenGL, rows bottom-up) as an upright image (rows top-down)."""
    return np.ascontiguousarray(image[::-1])


@dataclass(frozen=True, eq=False)
class StepFacts:
    """The simulator's facts at every step of one episode (arrays over the episode's T steps)."""

    grasp: np.ndarray  # (T,) bool
    hold: np.ndarray  # (T,) bool
    step_holds: np.ndarray  # (T, K) bool
    goal: np.ndarray  # (T,) bool

    def __post_init__(self):
        length = len(self.grasp)
        for name in ("hold", "step_holds", "goal"):
            if len(getattr(self, name)) != length:
                raise ValueError(f"StepFacts.{name} has {len(getattr(self, name))} steps, grasp has {length}")
        if self.step_holds.ndim != 2:
            raise ValueError(f"StepFacts.step_holds must be (T, K), got shape {self.step_holds.shape}")

    def equal(self, other: StepFacts) -> dict[str, np.ndarray]:
        """Per fact, a (T,) bool array: where the two agree."""
        return {
            name: np.all(
                np.asarray(getattr(self, name)).reshape(len(self.grasp), -1)
                == np.asarray(getattr(other, name)).reshape(len(other.grasp), -1),
                axis=1,
            )
            for name in ("grasp", "hold", "step_holds", "goal")
        }


@dataclass(frozen=True, eq=False)
class LiberoEpisode:
    """One recorded demonstration: the low-dimensional trajectory and the images of its rendered frames."""

    name: str  # demo group, e.g. "demo_3"
    task: str  # task name (file stem for a real one-task LIBERO file)
    instruction: str
    gripper_states: np.ndarray  # (T, 2) finger joint positions
    ee_pos: np.ndarray  # (T, 3) end-effector position, metres, robot base frame
    actions: np.ndarray  # (T, 7); last column: gripper command (+1 close, -1 open)
    rewards: np.ndarray  # (T,)
    dones: np.ndarray  # (T,)
    frames: tuple[int, ...]  # steps whose images are stored
    images: dict[int, tuple[np.ndarray, np.ndarray]] = field(repr=False)  # step -> (agentview, wrist), as stored
    subgoals: tuple[str, ...] | None = None
    facts: StepFacts | None = None  # the simulator's facts per step (stored `labels`, or computed)
    success: bool | None = None  # the renderer's record of its own rollout (not used for labels)
    source: str = ""
    states: np.ndarray | None = field(default=None, repr=False)  # (T, S) simulator states, before each action
    subgoal_predicates: list | None = None  # per step, its predicates ([["goal", i]] or [["hold", object]])
    bddl_file_name: str | None = None
    bddl_file_content: str | None = None
    model_file: str | None = None

    @property
    def length(self) -> int:
        return len(self.actions)

    def views(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(agentview, wrist) upright images at a rendered step."""
        if step not in self.images:
            raise KeyError(f"{self.name}: step {step} has no stored images (rendered: {list(self.frames)[:12]})")
        agent, wrist = self.images[step]
        return upright(agent), upright(wrist)


def _json_attr(attrs, key: str, default: Any = None) -> Any:
    if key not in attrs:
        return default
    value = attrs[key]
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return json.loads(value)
    except (TypeError, json.JSONDecodeError):
        return value


def _instruction(problem_info: Any) -> str | None:
    if isinstance(problem_info, dict):
        text = problem_info.get("language_instruction")
        if isinstance(text, list):
            text = " ".join(text)
        if isinstance(text, str) and text and not text.startswith("("):
            return text.strip()
    return None


def _demo_sort_key(name: str) -> tuple[int, str]:
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (10**9, name)


def libero_files(path: str | Path) -> list[Path]:
    """The HDF5 files of a LIBERO path: the file itself, or a folder's `*.hdf5` files in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.hdf5") if not p.name.endswith(".partial.hdf5"))
        if not files:
            raise FileNotFoundError(f"no LIBERO .hdf5 files in the folder {path}")
        return files
    if not path.exists():
        raise FileNotFoundError(f"no LIBERO file at {path}")
    return [path]


def read_libero(path: str | Path, frames: str | list[int] = "stored", max_frames: int = 10) -> list[LiberoEpisode]:
    """Every demo of a LIBERO HDF5 file (or of every file of a folder), in file then demo-number order.

    frames: "stored" (the renderer's `rendered_frames`; for a real LIBERO demo, which stores every step,
        `max_frames` evenly spaced steps from first to last), or explicit steps.
    """
    return [episode for file in libero_files(path) for episode in _read_file(file, frames, max_frames)]


def _text_attr(attrs, key: str) -> str | None:
    """A string attribute; None when absent, empty or the "(per demo)" placeholder of older jetgym files."""
    value = attrs.get(key)
    if isinstance(value, bytes):
        value = value.decode()
    return value if isinstance(value, str) and value and value != "(per demo)" else None


def _read_labels(demo, where: str, length: int) -> StepFacts | None:
    if "labels" not in demo:
        return None
    group = demo["labels"]
    missing = [k for k in ("grasp", "hold", "step_holds", "goal") if k not in group]
    if missing:
        raise LiberoFormatError(f"{where}/labels: missing {', '.join(missing)}")
    facts = StepFacts(**{k: np.asarray(group[k], dtype=bool) for k in ("grasp", "hold", "step_holds", "goal")})
    if len(facts.grasp) != length:
        raise LiberoFormatError(f"{where}/labels: {len(facts.grasp)} steps, the demo has {length}")
    return facts


def _read_file(file_path: Path, frames, max_frames: int) -> list[LiberoEpisode]:
    import h5py

    episodes = []
    try:
        file = h5py.File(file_path, "r")
    except OSError as error:  # h5py's message names no file ("file signature not found")
        raise LiberoFormatError(
            f"{file_path}: not a readable HDF5 file ({str(error).splitlines()[0]}); a LIBERO set "
            f"is a demonstrations .hdf5 file (or a folder of them): check dataset.path"
        ) from None
    with file:
        if "data" not in file:
            raise LiberoFormatError(f"{file_path}: no 'data' group (not the LIBERO layout)")
        data = file["data"]
        file_instruction = _instruction(_json_attr(data.attrs, "problem_info", {}))
        demos = sorted((k for k in data if k.startswith("demo")), key=_demo_sort_key)
        if not demos:
            raise LiberoFormatError(f"{file_path}: 'data' holds no demo_N groups")
        for name in demos:
            demo = data[name]
            where = f"{file_path}:data/{name}"
            if "obs" not in demo:
                raise LiberoFormatError(f"{where}: no 'obs' group")
            obs = demo["obs"]
            missing = [k for k in (*IMAGE_KEYS, *REQUIRED_OBS) if k not in obs] + [
                k for k in REQUIRED_DEMO if k not in demo
            ]
            if missing:
                raise LiberoFormatError(f"{where}: missing {', '.join(missing)}")
            actions = np.asarray(demo["actions"], dtype=np.float64)
            length = len(actions)
            instruction = _instruction(_json_attr(demo.attrs, "problem_info", {})) or file_instruction
            if not instruction:
                raise LiberoFormatError(f"{where}: no language_instruction in problem_info (data or demo attributes)")
            if frames == "stored":
                stored = demo.attrs.get("rendered_frames")
                if stored is not None:
                    steps = [int(s) for s in np.atleast_1d(stored)]
                else:  # a real LIBERO demo: every step has images; keep evenly spaced ones
                    steps = sorted(
                        set(np.linspace(0, length - 1, min(max_frames, length)).round().astype(int).tolist())
                    )
            else:
                steps = sorted({int(s) for s in frames})
            bad = [s for s in steps if not 0 <= s < length]
            if bad:
                raise LiberoFormatError(f"{where}: frame steps {bad} outside the episode's {length} steps")
            agent, wrist = obs["agentview_rgb"], obs["eye_in_hand_rgb"]
            images = {s: (np.asarray(agent[s]), np.asarray(wrist[s])) for s in steps}
            rewards = np.asarray(demo["rewards"], dtype=np.float64) if "rewards" in demo else np.zeros(length)
            dones = np.asarray(demo["dones"], dtype=np.float64) if "dones" in demo else np.zeros(length)
            subgoals = _json_attr(demo.attrs, "subgoals")
            success = demo.attrs.get("success")
            episodes.append(
                LiberoEpisode(
                    name=name,
                    task=str(demo.attrs.get("task_name", file_path.stem.removesuffix("_demo"))),
                    instruction=instruction,
                    gripper_states=np.asarray(obs["gripper_states"], dtype=np.float64),
                    ee_pos=np.asarray(obs["ee_pos"], dtype=np.float64),
                    actions=actions,
                    rewards=rewards,
                    dones=dones,
                    frames=tuple(steps),
                    images=images,
                    subgoals=tuple(subgoals) if subgoals else None,
                    facts=_read_labels(demo, where, length),
                    success=None if success is None else bool(success),
                    source=str(file_path),
                    states=np.asarray(demo["states"], dtype=np.float64) if "states" in demo else None,
                    subgoal_predicates=_json_attr(demo.attrs, "subgoal_predicates"),
                    bddl_file_name=_text_attr(demo.attrs, "bddl_file_name") or _text_attr(data.attrs, "bddl_file_name"),
                    bddl_file_content=(
                        _text_attr(demo.attrs, "bddl_file_content") or _text_attr(data.attrs, "bddl_file_content")
                    ),
                    model_file=_text_attr(demo.attrs, "model_file"),
                )
            )
    return episodes


class LiberoLabelError(ValueError):
    """Frames that cannot be labelled: no stored simulator facts and no simulator to compute them."""


def split_instruction(instruction: str) -> tuple[str, ...]:
    """Steps of an instruction without recorded sub-goals: "put both the A and the B <rest>" -> two steps;
    otherwise split before "and <verb>"; a one-step instruction stays whole."""
    text = instruction.strip().rstrip(".")
    both = re.fullmatch(r"(\w+) both (the .+?) and (the .+?) ((?:in|on|into|onto|to) .+)", text)
    if both:
        verb, first, second, rest = both.groups()
        return (f"{verb} {first} {rest}", f"{verb} {second} {rest}")
    parts = re.split(r" and (?=(?:put|place|close|open|turn|pick|push|pull)\b)", text)
    return tuple(p.strip() for p in parts if p.strip())


def episode_steps(episode) -> tuple[str, ...]:
    return tuple(episode.subgoals) if episode.subgoals else split_instruction(episode.instruction)
