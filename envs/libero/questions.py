"""LIBERO offline robot QA: eight question types per frame, labels from the simulator's facts by fixed rules.

Every frame of a recorded episode gets eight questions that share one context (the frame's views, or
their `describe` text, and the instruction); only the last line, the question, differs. Nothing a label is
computed from (contacts, predicates, end-effector positions, step index) appears in a question.

Facts per step t of an episode of T steps (restored simulator state after action t; `sim`):
    grasp(t)  some movable object is grasped (robosuite's `_check_grasp`: both finger pads touch it)
    hold(t)   a grasped object touches nothing but the gripper (off its support)
    P_k(t)    every predicate of instruction step k holds (BDDL goal predicates; "pick up X": X held)
    goal(t)   every BDDL goal predicate of the task holds
    ee(t)     = ee_pos[t], the end-effector position (robot base frame, recorded)

Rules (constants below; `t - j` below 0 does not exist):
    step k done by t   P_k(s) for some s <= t (a step once done stays done)
    r2_dir     d = ee(min(t + DIR_HORIZON, T - 1)) - ee(t); max |d_i| <= STILL -> "stay"; otherwise the axis
               of the largest |d_i| and its sign: +x forward, -x backward, +y left, -y right, +z up, -z down
    r2_done    goal(t)                                            (binary)
    r2_first   step 1 done by t                                   (binary)
    r2_grasp   grasp(t)                                           (binary)
    r2_hold    hold(t)                                            (binary)
    r2_instr   the first step not done by t; all done -> "finished" (categorical)
    r2_phase   hold(t) -> carrying; else hold(t - j) for some j in 1..PHASE_WINDOW -> releasing;
               else grasp(t) -> grasping; else moving             (categorical)
    r2_prog    p = t / t_end with t_end the first step where goal holds (none: T - 1, p capped below 1):
               p < 0.25, < 0.5, < 0.75, < 1, >= 1 -> levels 0..4  (ordinal)
Categorical questions carry an abstention candidate ("cannot tell"), scored like the others and counted
as an error when chosen. A file's rewards and dones are never read for labels.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from jetgym.questions.sets import _apply_limit, question_set
from jetgym.scorers.types import Question

from .reader import LiberoLabelError, episode_steps

QUESTION_TYPES = ("r2_dir", "r2_done", "r2_first", "r2_grasp", "r2_hold", "r2_instr", "r2_phase", "r2_prog")
LIBERO_SUBSETS = ("all", "images")
Perception = Literal["describe", "images"]

PHASE_WINDOW = 8  # steps (0.4 s at 20 Hz) after holding that count as letting go
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
DEFAULT_PATH = DATA_DIR  # the shipped set: one official-layout file per libero_10 task


# --------------------------------------------------------------------------- rules over the simulator's facts


def _facts(episode):
    if episode.facts is None:
        raise LiberoLabelError(
            f"{episode.source or episode.task}: {episode.name} has no simulator facts; load it "
            "with load_libero (which stores or computes them) or give the episode its facts"
        )
    return episode.facts


def phase(facts, t: int) -> str:
    if facts.hold[t]:
        return "carrying"
    if any(facts.hold[t - j] for j in range(1, PHASE_WINDOW + 1) if t - j >= 0):
        return "releasing"
    if facts.grasp[t]:
        return "grasping"
    return "moving"


def direction(ee_pos: np.ndarray, t: int) -> str:
    ee_pos = np.asarray(ee_pos, dtype=float)
    delta = ee_pos[min(t + DIR_HORIZON, len(ee_pos) - 1)] - ee_pos[t]
    axis = int(np.argmax(np.abs(delta)))
    if abs(delta[axis]) <= STILL:
        return "stay"
    return (("forward", "backward"), ("left", "right"), ("up", "down"))[axis][0 if delta[axis] > 0 else 1]


def success_step(goal: np.ndarray) -> int | None:
    """The first step where the task's goal predicates hold (None: never)."""
    hits = np.flatnonzero(np.asarray(goal, dtype=bool))
    return int(hits[0]) if len(hits) else None


def steps_done(episode, t: int) -> list[bool]:
    """Which of the episode's instruction steps are done by step t (their predicates held at some s <= t)."""
    holds = np.asarray(_facts(episode).step_holds, dtype=bool)
    return [bool(np.any(holds[: t + 1, k])) for k in range(holds.shape[1])]


def progress_level(goal: np.ndarray, t: int, length: int) -> int:
    end = success_step(goal)
    if end is None:
        p = min(t / max(length - 1, 1), 0.999)
    else:
        p = t / end if end > 0 else 1.0
    return int(np.searchsorted(PROGRESS_EDGES, p, side="right"))


def frame_labels(episode, t: int) -> dict[str, str | bool | int]:
    """Every rule's label at step t (question type -> label)."""
    facts = _facts(episode)
    done_steps = steps_done(episode, t)
    first_open = next((k for k, d in enumerate(done_steps) if not d), None)
    return {
        "r2_dir": direction(episode.ee_pos, t),
        "r2_done": bool(facts.goal[t]),
        "r2_first": done_steps[0],
        "r2_grasp": bool(facts.grasp[t]),
        "r2_hold": bool(facts.hold[t]),
        "r2_instr": "finished" if first_open is None else f"step{first_open + 1}",
        "r2_phase": phase(facts, t),
        "r2_prog": progress_level(facts.goal, t, episode.length),
    }


def with_facts(episodes: list) -> list:
    """The episodes with their simulator facts: stored in the file (`labels`), else computed by restoring
    their states in the simulator; without either the file is refused (never labelled by heuristics)."""
    missing = [e for e in episodes if e.facts is None]
    if not missing:
        return episodes
    from . import sim

    first = missing[0]
    if not sim.simulator_installed():
        raise LiberoLabelError(
            f"{first.source}: {first.name} stores no simulator labels (a 'labels' group) and the "
            f"LIBERO simulator is not installed, so its frames cannot be labelled; install it: "
            f"{sim.INSTALL}"
        )
    computed = {id(old): new for old, new in zip(missing, sim.label_episodes(missing))}
    return [computed.get(id(e), e) for e in episodes]


# --------------------------------------------------------------------------- perception: describe

PALETTE = (  # name, RGB
    ("black", (20, 20, 20)),
    ("dark gray", (70, 70, 70)),
    ("gray", (130, 130, 130)),
    ("white", (225, 225, 225)),
    ("red", (190, 40, 40)),
    ("orange", (220, 130, 40)),
    ("yellow", (220, 200, 60)),
    ("green", (60, 150, 60)),
    ("blue", (50, 80, 180)),
    ("brown", (110, 70, 40)),
    ("tan", (180, 150, 110)),
)
REGIONS = ("top", "middle", "bottom")


@lru_cache(maxsize=1)
def _colour_table() -> np.ndarray:
    """Nearest palette colour of every 6-bit-per-channel colour (centre of its bin), (64, 64, 64)."""
    palette = np.array([rgb for _, rgb in PALETTE], dtype=np.float32)
    levels = np.arange(64, dtype=np.float32) * 4 + 1.5
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3)
    nearest = np.concatenate(
        [np.argmin(((chunk[:, None] - palette[None]) ** 2).sum(-1), axis=1) for chunk in np.array_split(grid, 16)]
    )
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

    centre = names[height // 3 : 2 * height // 3, width // 3 : 2 * width // 3]
    return f"{name}: mostly {shares(names)}; in the centre {shares(centre)}."


def describe_frame(agentview: np.ndarray, wrist: np.ndarray) -> str:
    return (
        describe_view(agentview, "Front camera")
        + "\n"
        + describe_view(wrist, "Wrist camera (looking down from the gripper)")
    )


# --------------------------------------------------------------------------- questions


def _binary(context: str, question: str, value: bool, qid: str, images: tuple) -> Question:
    return Question(
        context=f"{context}Question: {question} Answer yes or no.\nAnswer:",
        candidates=(" no", " yes"),
        kind="binary",
        labels=("no", "yes"),
        gold=int(value),
        images=images,
        id=qid,
    )


def _categorical(
    context: str, question: str, options: list[tuple[str, str]], gold: str, qid: str, images: tuple, abstain: bool
) -> Question:
    if abstain:
        options = [*options, (ABSTAIN_LABEL, ABSTAIN_TEXT)]
    listing = "\n".join(f"- {text}" for _, text in options)
    return Question(
        context=f"{context}Question: {question}\nOptions:\n{listing}\nAnswer:",
        candidates=tuple(" " + text for _, text in options),
        labels=tuple(label for label, _ in options),
        gold=gold,
        images=images,
        id=qid,
    )


def frame_context(episode, t: int, perception: Perception = "describe") -> tuple[str, tuple]:
    """The shared part of a frame's questions: its context text and images."""
    agent, wrist = episode.views(t)
    head = "You see a robot arm at a table, through a front camera and a camera on its gripper.\n"
    if perception == "describe":
        return f"{head}{describe_frame(agent, wrist)}\nThe robot's instruction: {episode.instruction}\n", ()
    if perception == "images":
        return (
            f"{head}The first image is the front camera, the second the wrist camera.\nThe robot's instruction: {episode.instruction}\n",
            (agent, wrist),
        )
    raise ValueError(f"unknown perception {perception!r}; known: describe, images")


def question_id(set_name: str, episode, t: int, qtype: str) -> str:
    return f"{set_name}/{episode.task}/{episode.name}/t{t:03d}/{qtype}"


def parse_id(qid: str) -> dict[str, str]:
    """{"set", "task", "episode", "frame", "type"} of a LIBERO question id; "episode" is unique across tasks."""
    set_name, task, demo, frame, qtype = qid.split("/")
    return {
        "set": set_name,
        "task": task,
        "episode": f"{task}/{demo}",
        "frame": f"{task}/{demo}/{frame}",
        "type": qtype,
    }


def frame_questions(
    episode, t: int, perception: Perception = "describe", abstain: bool = True, set_name: str = "libero10"
) -> list[Question]:
    """The eight questions of frame t, in QUESTION_TYPES order, sharing one context."""
    context, images = frame_context(episode, t, perception)
    labels = frame_labels(episode, t)
    steps = episode_steps(episode)
    qid = lambda qtype: question_id(set_name, episode, t, qtype)  # noqa: E731
    step_options = [(f"step{k + 1}", text) for k, text in enumerate(steps)] + [
        ("finished", "nothing, the task is finished")
    ]
    return [
        _categorical(
            context,
            "Over the next half second, which way does the robot's gripper move?",
            list(DIRECTIONS),
            labels["r2_dir"],
            qid("r2_dir"),
            images,
            abstain,
        ),
        _binary(
            context, "Is the instruction fully carried out in this frame?", labels["r2_done"], qid("r2_done"), images
        ),
        _binary(
            context,
            f"The first step of the instruction is to {steps[0]}. Is that step already done?",
            labels["r2_first"],
            qid("r2_first"),
            images,
        ),
        _binary(context, "Is the gripper grasping an object right now?", labels["r2_grasp"], qid("r2_grasp"), images),
        _binary(
            context,
            "Is the robot holding an object up in its gripper, off the surface it rested on?",
            labels["r2_hold"],
            qid("r2_hold"),
            images,
        ),
        _categorical(
            context,
            "Which part of the instruction is the first one not done yet?",
            step_options,
            labels["r2_instr"],
            qid("r2_instr"),
            images,
            abstain,
        ),
        _categorical(
            context,
            "What is the robot doing at this moment?",
            list(PHASES),
            labels["r2_phase"],
            qid("r2_phase"),
            images,
            abstain,
        ),
        Question(
            context=f"{context}Question: How far along is the robot with the instruction?\nAnswer:",
            candidates=tuple(" " + p for p in PROGRESS),
            kind="ordinal",
            labels=tuple(f"level{i}" for i in range(len(PROGRESS))),
            gold=labels["r2_prog"],
            images=images,
            id=qid("r2_prog"),
        ),
    ]


@lru_cache(maxsize=4)
def _episodes(path: str):
    from .reader import read_libero

    return with_facts(read_libero(path))


@question_set(LIBERO_SUBSETS, report="jetgym.envs.libero.report:write_libero_report")
def load_libero(subset: str = "all", limit: int | None = None, path: str | None = None) -> list[Question]:
    """LIBERO offline QA: eight questions per rendered frame of every episode in the file.

    subset: `all` (views as `describe` text; text-only models) or `images` (both views attached; vision-
    language models). path: a LIBERO HDF5 file or a folder of them (default: the shipped libero10 set, one
    file per task). Labels come from the simulator's facts (stored in the file, or computed when the simulator
    is installed); a file with neither is refused. Ids are `<set>/<task>/<demo>/t<step>/<type>` with set
    `libero10` for the shipped set, else the file or folder name (without `_demo`).
    """
    if subset not in LIBERO_SUBSETS:
        raise ValueError(f"unknown subset {subset!r} for question set 'libero'; known: {', '.join(LIBERO_SUBSETS)}")
    file = Path(path) if path else DEFAULT_PATH
    if not file.exists() or (not path and not list(file.glob("*.hdf5"))):
        raise FileNotFoundError(
            f"no LIBERO question file at {file}"
            + ("" if path else " (the shipped set is missing: regenerate it, see docs/libero.md)")
        )
    set_name = "libero10" if file.resolve() == DEFAULT_PATH.resolve() else file.stem.removesuffix("_demo")
    perception: Perception = "describe" if subset == "all" else "images"
    questions = [
        q
        for episode in _episodes(str(file.resolve()))
        for t in episode.frames
        for q in frame_questions(episode, t, perception, set_name=set_name)
    ]
    return _apply_limit(questions, limit)
