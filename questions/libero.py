"""LIBERO offline robot QA: eight question types per frame, labels from recorded states by fixed rules.

Every frame of a recorded episode gets eight questions that share one context (the frame's views, or
their `describe` text, and the instruction); only the last line, the question, differs. Nothing a label is
computed from (gripper opening, end-effector positions, step index, rewards) appears in a question.

Signals (per step t of an episode of T steps; see docs/libero.md):
    width(t)  = gripper_states[t, 0] - gripper_states[t, 1]   finger opening, metres (Panda: ~0.08 open)
    close(t)  = actions[t, -1] > 0                            the gripper is commanded closed
    ee(t)     = ee_pos[t]                                     end-effector position, robot base frame

Rules (constants below; `t - j` below 0 does not exist):
    grasp(t)   close(t) and not close(t - j) for some j in 1..GRASP_WINDOW (the fingers are closing)
    hold(t)    close(t) and width(t) > HOLD_MIN_WIDTH and not grasp(t) (closed on something)
    release(t) not close(t) and hold(t - j) for some j in 1..GRASP_WINDOW
    phase(t)   grasp -> grasping; hold -> carrying; release -> releasing; otherwise -> moving (no object)
    done(t)    some s <= t has rewards[s] > 0 or dones[s] > 0 (the task's success predicate held)
    step k done by t: with `subgoal_done` recorded, some s <= t has subgoal_done[s, k]; without it (a real
               LIBERO demo), step k < K-1 is done after the (k+1)-th release, the last step at done(t)
    r2_dir     d = ee(min(t + DIR_HORIZON, T - 1)) - ee(t); max |d_i| <= STILL -> "stay"; otherwise the axis
               of the largest |d_i| and its sign: +x forward, -x backward, +y left, -y right, +z up, -z down
    r2_done    done(t)                                            (binary)
    r2_first   step 0 done by t                                   (binary)
    r2_grasp   grasp(t)                                           (binary)
    r2_hold    hold(t)                                            (binary)
    r2_instr   the first step not done by t; all done -> "finished" (categorical)
    r2_phase   phase(t)                                           (categorical)
    r2_prog    p = t / t_end with t_end the first success step (or T - 1 for a failed attempt, p capped
               below 1): p < 0.25, < 0.5, < 0.75, < 1, >= 1 -> levels 0..4   (ordinal)
Categorical questions carry an abstention candidate ("cannot tell"), scored like the others and counted
as an error when chosen.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from jetgym.scorers.types import Question

from .sets import _apply_limit, register_question_set

QUESTION_TYPES = ("r2_dir", "r2_done", "r2_first", "r2_grasp", "r2_hold", "r2_instr", "r2_phase", "r2_prog")
LIBERO_SUBSETS = ("all", "images")
Perception = Literal["describe", "images"]

GRASP_WINDOW = 8  # steps (0.4 s at 20 Hz)
HOLD_MIN_WIDTH = 0.01  # metres of finger opening, strictly above: an object between the fingers
DIR_HORIZON = 10  # steps ahead for the motion direction (0.5 s)
STILL = 0.02  # metres: a larger displacement along some axis counts as motion
PROGRESS_EDGES = (0.25, 0.5, 0.75, 1.0)

ABSTAIN_LABEL = "cannot_tell"
ABSTAIN_TEXT = "I cannot tell"
DIRECTIONS = (  # label, answer text
    ("forward", "forward, away from the robot's base"),
    ("backward", "backward, toward the robot's base"),
    ("left", "to the robot's left"),
    ("right", "to the robot's right"),
    ("up", "up"),
    ("down", "down"),
    ("stay", "it stays where it is"),
)
PHASES = (
    ("moving", "moving without holding anything"),
    ("grasping", "closing its gripper on an object"),
    ("carrying", "carrying an object in its gripper"),
    ("releasing", "letting go of an object"),
)
PROGRESS = ("just started", "less than halfway", "more than halfway", "nearly done", "finished")

DATA_DIR = Path(__file__).resolve().parent / "data" / "libero10"
DEFAULT_FILE = DATA_DIR / "libero10.hdf5"


# --------------------------------------------------------------------------- signals and rules

def gripper_width(gripper_states: np.ndarray) -> np.ndarray:
    gripper_states = np.asarray(gripper_states, dtype=float)
    return gripper_states[:, 0] - gripper_states[:, 1]


def closed_command(actions: np.ndarray) -> np.ndarray:
    return np.asarray(actions, dtype=float)[:, -1] > 0


def grasping(close: np.ndarray, t: int) -> bool:
    if not close[t]:
        return False
    return any(not close[t - j] for j in range(1, GRASP_WINDOW + 1) if t - j >= 0)


def holding(close: np.ndarray, width: np.ndarray, t: int) -> bool:
    return bool(close[t] and width[t] > HOLD_MIN_WIDTH and not grasping(close, t))


def releasing(close: np.ndarray, width: np.ndarray, t: int) -> bool:
    if close[t]:
        return False
    return any(holding(close, width, t - j) for j in range(1, GRASP_WINDOW + 1) if t - j >= 0)


def phase(close: np.ndarray, width: np.ndarray, t: int) -> str:
    if grasping(close, t):
        return "grasping"
    if holding(close, width, t):
        return "carrying"
    if releasing(close, width, t):
        return "releasing"
    return "moving"


def direction(ee_pos: np.ndarray, t: int) -> str:
    ee_pos = np.asarray(ee_pos, dtype=float)
    delta = ee_pos[min(t + DIR_HORIZON, len(ee_pos) - 1)] - ee_pos[t]
    axis = int(np.argmax(np.abs(delta)))
    if abs(delta[axis]) <= STILL:
        return "stay"
    return (("forward", "backward"), ("left", "right"), ("up", "down"))[axis][0 if delta[axis] > 0 else 1]


def success_step(rewards: np.ndarray, dones: np.ndarray) -> int | None:
    hits = np.flatnonzero((np.asarray(rewards) > 0) | (np.asarray(dones) > 0))
    return int(hits[0]) if len(hits) else None


def task_done(rewards: np.ndarray, dones: np.ndarray, t: int) -> bool:
    first = success_step(rewards, dones)
    return first is not None and t >= first


def release_steps(close: np.ndarray, width: np.ndarray) -> list[int]:
    """The first step of every release (opening right after holding)."""
    steps = []
    for t in range(len(close)):
        if releasing(close, width, t) and not (t > 0 and releasing(close, width, t - 1)):
            steps.append(t)
    return steps


def steps_done(episode, t: int) -> list[bool]:
    """Which of the episode's instruction steps are finished by step t."""
    count = len(episode_steps(episode))
    if episode.subgoal_done is not None:
        return [bool(np.any(episode.subgoal_done[: t + 1, k])) for k in range(count)]
    close, width = closed_command(episode.actions), gripper_width(episode.gripper_states)
    releases = release_steps(close, width)
    done = [k < len(releases) and releases[k] <= t for k in range(count - 1)]
    return done + [task_done(episode.rewards, episode.dones, t)]


def progress_level(rewards: np.ndarray, dones: np.ndarray, t: int, length: int) -> int:
    end = success_step(rewards, dones)
    if end is None:
        p = min(t / max(length - 1, 1), 0.999)
    else:
        p = t / end if end > 0 else 1.0
    return int(np.searchsorted(PROGRESS_EDGES, p, side="right"))


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


def frame_labels(episode, t: int) -> dict[str, str | bool | int]:
    """Every rule's label at step t (question type -> label)."""
    close, width = closed_command(episode.actions), gripper_width(episode.gripper_states)
    done_steps = steps_done(episode, t)
    first_open = next((k for k, d in enumerate(done_steps) if not d), None)
    return {
        "r2_dir": direction(episode.ee_pos, t),
        "r2_done": task_done(episode.rewards, episode.dones, t),
        "r2_first": done_steps[0],
        "r2_grasp": grasping(close, t),
        "r2_hold": holding(close, width, t),
        "r2_instr": "finished" if first_open is None else f"step{first_open + 1}",
        "r2_phase": phase(close, width, t),
        "r2_prog": progress_level(episode.rewards, episode.dones, t, episode.length),
    }


# --------------------------------------------------------------------------- perception: describe

PALETTE = (  # name, RGB
    ("black", (20, 20, 20)), ("dark gray", (70, 70, 70)), ("gray", (130, 130, 130)), ("white", (225, 225, 225)),
    ("red", (190, 40, 40)), ("orange", (220, 130, 40)), ("yellow", (220, 200, 60)), ("green", (60, 150, 60)),
    ("blue", (50, 80, 180)), ("brown", (110, 70, 40)), ("tan", (180, 150, 110)),
)
REGIONS = ("top", "middle", "bottom")


@lru_cache(maxsize=1)
def _colour_table() -> np.ndarray:
    """Nearest palette colour of every 6-bit-per-channel colour (centre of its bin), (64, 64, 64)."""
    palette = np.array([rgb for _, rgb in PALETTE], dtype=np.float32)
    levels = np.arange(64, dtype=np.float32) * 4 + 1.5
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3)
    nearest = np.concatenate([np.argmin(((chunk[:, None] - palette[None]) ** 2).sum(-1), axis=1)
                              for chunk in np.array_split(grid, 16)])
    return nearest.reshape(64, 64, 64).astype(np.uint8)


def colour_names(image: np.ndarray) -> np.ndarray:
    """Index into PALETTE of the nearest palette colour of every pixel (channels quantized to 64 levels)."""
    q = np.asarray(image, dtype=np.uint8) >> 2
    return _colour_table()[q[..., 0], q[..., 1], q[..., 2]]


def describe_view(image: np.ndarray, name: str, top: int = 3) -> str:
    """One sentence about an upright view from its pixels only: the main colours of the whole view and
    of its centre (the middle ninth), as shares of the pixels."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"describe needs an (H, W, 3) image, got shape {image.shape}")
    names = colour_names(image)
    height, width = names.shape

    def shares(block: np.ndarray) -> str:
        counts = np.bincount(block.ravel(), minlength=len(PALETTE)) / block.size
        order = np.argsort(-counts, kind="stable")[:top]
        return ", ".join(f"{PALETTE[i][0]} {round(100 * counts[i])}%" for i in order if counts[i] >= 0.05)

    centre = names[height // 3: 2 * height // 3, width // 3: 2 * width // 3]
    return f"{name}: mostly {shares(names)}; in the centre {shares(centre)}."


def describe_frame(agentview: np.ndarray, wrist: np.ndarray) -> str:
    return (describe_view(agentview, "Front camera") + "\n"
            + describe_view(wrist, "Wrist camera (looking down from the gripper)"))


# --------------------------------------------------------------------------- questions

def _binary(context: str, question: str, value: bool, qid: str, images: tuple) -> Question:
    return Question(context=f"{context}Question: {question} Answer yes or no.\nAnswer:", candidates=(" no", " yes"),
                    kind="binary", labels=("no", "yes"), gold=int(value), images=images, id=qid)


def _categorical(context: str, question: str, options: list[tuple[str, str]], gold: str, qid: str, images: tuple,
                 abstain: bool) -> Question:
    if abstain:
        options = [*options, (ABSTAIN_LABEL, ABSTAIN_TEXT)]
    listing = "\n".join(f"- {text}" for _, text in options)
    return Question(context=f"{context}Question: {question}\nOptions:\n{listing}\nAnswer:",
                    candidates=tuple(" " + text for _, text in options), labels=tuple(label for label, _ in options),
                    gold=gold, images=images, id=qid)


def frame_context(episode, t: int, perception: Perception = "describe") -> tuple[str, tuple]:
    """The shared part of a frame's questions: its context text and images."""
    agent, wrist = episode.views(t)
    head = "You see a robot arm at a table, through a front camera and a camera on its gripper.\n"
    if perception == "describe":
        return f"{head}{describe_frame(agent, wrist)}\nThe robot's instruction: {episode.instruction}\n", ()
    if perception == "images":
        return f"{head}The first image is the front camera, the second the wrist camera.\nThe robot's instruction: {episode.instruction}\n", (agent, wrist)
    raise ValueError(f"unknown perception {perception!r}; known: describe, images")


def question_id(set_name: str, episode, t: int, qtype: str) -> str:
    return f"{set_name}/{episode.task}/{episode.name}/t{t:03d}/{qtype}"


def parse_id(qid: str) -> dict[str, str]:
    """{"set", "task", "episode", "frame", "type"} of a LIBERO question id; "episode" is unique across tasks."""
    set_name, task, demo, frame, qtype = qid.split("/")
    return {"set": set_name, "task": task, "episode": f"{task}/{demo}", "frame": f"{task}/{demo}/{frame}", "type": qtype}


def frame_questions(episode, t: int, perception: Perception = "describe", abstain: bool = True,
                    set_name: str = "libero10") -> list[Question]:
    """The eight questions of frame t, in QUESTION_TYPES order, sharing one context."""
    context, images = frame_context(episode, t, perception)
    labels = frame_labels(episode, t)
    steps = episode_steps(episode)
    qid = lambda qtype: question_id(set_name, episode, t, qtype)  # noqa: E731
    step_options = [(f"step{k + 1}", text) for k, text in enumerate(steps)] + [("finished", "nothing, the task is finished")]
    return [
        _categorical(context, "Over the next half second, which way does the robot's gripper move?",
                     list(DIRECTIONS), labels["r2_dir"], qid("r2_dir"), images, abstain),
        _binary(context, "Is the instruction fully carried out in this frame?", labels["r2_done"], qid("r2_done"), images),
        _binary(context, f"The first step of the instruction is to {steps[0]}. Is that step already done?",
                labels["r2_first"], qid("r2_first"), images),
        _binary(context, "Is the gripper closing on an object right now?", labels["r2_grasp"], qid("r2_grasp"), images),
        _binary(context, "Is the robot holding an object in its gripper?", labels["r2_hold"], qid("r2_hold"), images),
        _categorical(context, "Which part of the instruction is the robot working on now?", step_options,
                     labels["r2_instr"], qid("r2_instr"), images, abstain),
        _categorical(context, "What is the robot doing at this moment?", list(PHASES), labels["r2_phase"],
                     qid("r2_phase"), images, abstain),
        Question(context=f"{context}Question: How far along is the robot with the instruction?\nAnswer:",
                 candidates=tuple(" " + p for p in PROGRESS), kind="ordinal",
                 labels=tuple(f"level{i}" for i in range(len(PROGRESS))), gold=labels["r2_prog"], images=images,
                 id=qid("r2_prog")),
    ]


@lru_cache(maxsize=4)
def _episodes(path: str):
    from jetgym.envs.libero import read_libero

    return read_libero(path)


@register_question_set("libero", LIBERO_SUBSETS)
def load_libero(subset: str = "all", limit: int | None = None, path: str | None = None) -> list[Question]:
    """LIBERO offline QA: eight questions per rendered frame of every episode in the file.

    subset: `all` (views as `describe` text; text-only models) or `images` (both views attached; vision-
    language models). path: a LIBERO HDF5 file (default: the shipped libero10 set). Ids are
    `<set>/<task>/<demo>/t<step>/<type>` with set `libero10` for the shipped file, else the file stem.
    """
    if subset not in LIBERO_SUBSETS:
        raise ValueError(f"unknown subset {subset!r} for question set 'libero'; known: {', '.join(LIBERO_SUBSETS)}")
    file = Path(path) if path else DEFAULT_FILE
    if not file.exists():
        raise FileNotFoundError(f"no LIBERO question file at {file}" + ("" if path else " (the shipped set is missing: "
                                "regenerate it, see docs/libero.md)"))
    set_name = "libero10" if file.resolve() == DEFAULT_FILE.resolve() else file.stem
    perception: Perception = "describe" if subset == "all" else "images"
    questions = [q for episode in _episodes(str(file.resolve())) for t in episode.frames
                 for q in frame_questions(episode, t, perception, set_name=set_name)]
    return _apply_limit(questions, limit)
