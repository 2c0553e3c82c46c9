"""LIBERO offline QA: reader, label rules, questions, bootstrap, report, env and an end-to-end run."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from jetgym.envs.libero import LiberoEpisode, LiberoFormatError, read_libero, upright  # noqa: E402
from jetgym.questions import libero as L  # noqa: E402
from jetgym.questions.bootstrap import draw_clusters, episode_bootstrap, paired_episode_bootstrap  # noqa: E402
from jetgym.questions.sets import QUESTION_SETS  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "libero" / "libero_fixture.hdf5"
CONF = Path(__file__).resolve().parents[1] / "conf"


# ------------------------------------------------------------------ hand-made episodes

def make_episode(close, width=None, ee=None, rewards=None, dones=None, subgoal_done=None, subgoals=None,
                 instruction="put both the alphabet soup and the tomato sauce in the basket", frames=None):
    close = np.asarray(close, dtype=bool)
    length = len(close)
    width = np.full(length, 0.08) if width is None else np.asarray(width, dtype=float)
    gripper = np.stack([width / 2, -width / 2], axis=1)
    actions = np.zeros((length, 7))
    actions[:, -1] = np.where(close, 1.0, -1.0)
    frames = tuple(range(length)) if frames is None else tuple(frames)
    image = np.zeros((8, 8, 3), np.uint8)
    return LiberoEpisode(
        name="demo_0", task="task", instruction=instruction, gripper_states=gripper,
        ee_pos=np.zeros((length, 3)) if ee is None else np.asarray(ee, dtype=float), actions=actions,
        rewards=np.zeros(length) if rewards is None else np.asarray(rewards, dtype=float),
        dones=np.zeros(length) if dones is None else np.asarray(dones, dtype=float), frames=frames,
        images={t: (image, image) for t in frames}, subgoals=subgoals,
        subgoal_done=None if subgoal_done is None else np.asarray(subgoal_done, dtype=np.uint8))


def test_grasp_hold_release_phase_rules():
    # open 3 steps, closed for 12 (on an object 0.05 wide), open 12
    close = [False] * 3 + [True] * 12 + [False] * 12
    width = [0.08] * 3 + [0.05] * 12 + [0.08] * 12
    c, w = L.closed_command(np.c_[np.zeros((27, 6)), np.where(close, 1, -1)]), np.array(width)
    assert [L.grasping(c, t) for t in range(27)] == [False] * 3 + [True] * L.GRASP_WINDOW + [False] * (24 - L.GRASP_WINDOW)
    assert not L.holding(c, w, 3 + L.GRASP_WINDOW - 1) and L.holding(c, w, 3 + L.GRASP_WINDOW)
    assert L.releasing(c, w, 15) and L.releasing(c, w, 15 + L.GRASP_WINDOW - 1) and not L.releasing(c, w, 15 + L.GRASP_WINDOW)
    assert [L.phase(c, w, t) for t in (0, 3, 14, 15, 26)] == ["moving", "grasping", "carrying", "releasing", "moving"]


def test_grasp_at_first_step_and_hold_threshold_edges():
    closed = np.ones(20, dtype=bool)
    assert not L.grasping(closed, 0)  # no history: the gripper was not seen closing
    at = np.full(20, L.HOLD_MIN_WIDTH)
    assert not L.holding(closed, at, 15)  # exactly at the threshold: fingers closed on nothing
    assert L.holding(closed, at + 1e-6, 15)
    assert not L.holding(np.zeros(20, dtype=bool), np.full(20, 0.05), 15)  # open gripper holds nothing


def test_direction_rule_axes_stay_threshold_and_last_frame():
    steps = L.DIR_HORIZON + 5
    for axis, (plus, minus) in enumerate((("forward", "backward"), ("left", "right"), ("up", "down"))):
        ee = np.zeros((steps, 3))
        ee[:, axis] = np.linspace(0, 0.1, steps)
        assert L.direction(ee, 0) == plus and L.direction(-ee, 0) == minus
    still = np.zeros((steps, 3))
    assert L.direction(still, 0) == "stay"  # no motion
    edge = np.zeros((steps, 3))
    edge[L.DIR_HORIZON:, 2] = L.STILL  # exactly the threshold: still
    assert L.direction(edge, 0) == "stay"
    edge[L.DIR_HORIZON:, 2] = L.STILL + 1e-4
    assert L.direction(edge, 0) == "up"
    moving = np.zeros((steps, 3))
    moving[:, 0] = np.arange(steps)
    assert L.direction(moving, steps - 1) == "stay"  # last frame: nothing ahead
    assert L.direction(moving, steps - 3) == "forward"  # horizon clipped at the end


def test_done_progress_and_steps_with_recorded_subgoals():
    length = 41
    rewards = np.zeros(length)
    rewards[40] = 1
    sub = np.zeros((length, 2))
    sub[10:12, 0] = 1  # predicate held briefly: the step stays done
    sub[40, 1] = 1
    ep = make_episode([False] * length, rewards=rewards, subgoal_done=sub, subgoals=["first", "second"])
    assert not L.task_done(ep.rewards, ep.dones, 39) and L.task_done(ep.rewards, ep.dones, 40)  # the last frame
    labels = [L.frame_labels(ep, t) for t in (0, 9, 10, 30, 40)]
    assert [x["r2_first"] for x in labels] == [False, False, True, True, True]
    assert [x["r2_instr"] for x in labels] == ["step1", "step1", "step2", "step2", "finished"]
    assert [x["r2_prog"] for x in labels] == [0, 0, 1, 3, 4]
    assert L.progress_level(rewards, np.zeros(length), 20, length) == 2  # exactly 0.5: upper level
    failed = np.zeros(length)
    assert L.progress_level(failed, failed, length - 1, length) == 3  # a failed attempt never reaches "finished"


def test_steps_without_subgoals_come_from_releases_and_success():
    close = [False] * 2 + [True] * 12 + [False] * 10 + [True] * 12 + [False] * 6
    width = [0.08] * 2 + [0.05] * 12 + [0.08] * 10 + [0.05] * 12 + [0.08] * 6
    dones = np.zeros(len(close))
    dones[-1] = 1
    ep = make_episode(close, width, dones=dones)
    assert L.episode_steps(ep) == ("put the alphabet soup in the basket", "put the tomato sauce in the basket")
    assert L.steps_done(ep, 13) == [False, False]
    assert L.steps_done(ep, 14) == [True, False]  # first release
    assert L.steps_done(ep, len(close) - 2) == [True, False]  # second release, but not the success step yet
    assert L.steps_done(ep, len(close) - 1) == [True, True]


@pytest.mark.parametrize("instruction, steps", [
    ("put both the alphabet soup and the cream cheese box in the basket",
     ("put the alphabet soup in the basket", "put the cream cheese box in the basket")),
    ("turn on the stove and put the moka pot on it", ("turn on the stove", "put the moka pot on it")),
    ("put the white mug on the left plate and put the yellow and white mug on the right plate",
     ("put the white mug on the left plate", "put the yellow and white mug on the right plate")),
    ("open the top drawer", ("open the top drawer",)),
])
def test_split_instruction(instruction, steps):
    assert L.split_instruction(instruction) == steps


def test_frame_questions_kinds_ids_shared_context_and_no_state_leak():
    length = 30
    ep = make_episode([False] * 5 + [True] * 25, [0.08] * 5 + [0.04] * 25, ee=np.c_[np.zeros((length, 2)), np.linspace(0, 0.3, length)])
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

def write_real_layout(path: Path, length: int = 30, instruction: str = "put both the alphabet soup and the tomato sauce in the basket"):
    """A file as LIBERO's own demos are: every step has images, problem_info on `data`, no extras."""
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
            rewards = np.zeros(length)
            rewards[-1] = 1
            demo["rewards"] = rewards
            demo["dones"] = rewards
            demo["states"] = np.zeros((length, 5))
            demo["robot_states"] = np.zeros((length, 9))
            demo.attrs["num_samples"] = length


def test_reader_on_real_layout(tmp_path):
    path = tmp_path / "KITCHEN_SCENE1_task_demo.hdf5"
    write_real_layout(path)
    episodes = read_libero(path)
    assert [e.name for e in episodes] == ["demo_0", "demo_1"]
    ep = episodes[0]
    assert ep.task == "KITCHEN_SCENE1_task" and ep.subgoals is None and ep.length == 30
    assert ep.frames[0] == 0 and ep.frames[-1] == 29 and len(ep.frames) == 10
    agent, _ = ep.views(29)
    assert (agent[-1] == 255).all() and (upright(agent)[0] == 255).all()
    questions = L.load_libero(path=str(path))
    assert len(questions) == 2 * 10 * 8 and questions[0].id.startswith("KITCHEN_SCENE1_task_demo/")
    done = [q for q in questions if q.id.endswith("/r2_done")]
    assert [q.gold for q in done[:10]] == [0] * 9 + [1]  # only the last frame is done


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
    write_real_layout(path)
    with pytest.raises(LiberoFormatError, match="outside the episode"):
        read_libero(path, frames=[99])
    with pytest.raises(ValueError, match="unknown subset 'x' for question set 'libero'"):
        L.load_libero(subset="x", path=str(path))


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixture not rendered")
def test_reader_on_rendered_fixture():
    episodes = read_libero(FIXTURE)
    assert episodes and all(e.subgoals and e.subgoal_done.shape == (e.length, len(e.subgoals)) for e in episodes)
    with h5py.File(FIXTURE) as file:
        demo = file["data/demo_0"]
        for key in ("agentview_rgb", "eye_in_hand_rgb", "gripper_states", "joint_states", "ee_pos", "ee_ori", "ee_states"):
            assert key in demo["obs"]
        for key in ("actions", "states", "robot_states", "rewards", "dones"):
            assert key in demo
        assert {"env_args", "problem_info", "bddl_file_name", "num_demos", "total"} <= set(file["data"].attrs)
    for ep in episodes:
        assert ep.gripper_states.shape == (ep.length, 2) and ep.actions.shape == (ep.length, 7)
        agent, wrist = ep.views(ep.frames[0])
        assert agent.shape == wrist.shape == (128, 128, 3) and agent.std() > 5
    questions = L.load_libero(path=str(FIXTURE))
    assert len(questions) == 8 * sum(len(e.frames) for e in episodes)


def test_shipped_set_loads_and_is_registered():
    if not L.DEFAULT_FILE.exists():
        pytest.skip("shipped set not rendered")
    assert QUESTION_SETS.get("libero") is L.load_libero
    questions = L.load_libero(limit=16)
    assert len(questions) == 16 and questions[0].id.startswith("libero10/")


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
    exact = [sum(sum(groups[g]) for g in draw) / sum(len(groups[g]) for g in draw)
             for draw in itertools.product("abc", repeat=3)]  # all 27 equally likely resamples
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
        ep = make_episode([False] * 10 + [True] * 20 + [False] * 10, [0.08] * 10 + [0.05] * 20 + [0.08] * 10,
                          ee=np.c_[np.zeros((length, 2)), np.linspace(0, 0.2, length)], frames=(0, 15, 30))
        object.__setattr__(ep, "name", f"demo_{d}")
        eps.append(ep)
    return eps


def test_report_writes_summary_chart_examples(tmp_path, fake_scorer):
    from jetgym.questions.libero_report import compare_runs, write_libero_report
    from jetgym.scorers import make_scorer

    questions = [q for ep in _episodes_for_report() for t in ep.frames for q in L.frame_questions(ep, t, perception="images")]
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
    assert (tmp_path / "libero_by_type.png").stat().st_size > 1000 and list((tmp_path / "libero_examples").glob("*.png"))
    write_libero_report(questions, rows, tmp_path)  # rewriting replaces the section
    assert (tmp_path / "report.md").read_text().count("## LIBERO offline QA") == 1
    paired = compare_runs(questions, rows, rows)
    assert paired["overall"]["difference"] == 0 and set(paired) == {"overall", *L.QUESTION_TYPES}
    with pytest.raises(ValueError, match="have no response"):
        write_libero_report(questions, rows[:-1], tmp_path)


def test_env_passes_checker_and_replays_frames():
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    from jetgym.envs.libero import LiberoFramesEnv

    eps = _episodes_for_report()
    with pytest.raises(TypeError, match=r"LiberoFramesEnv needs questions_for\(episode, step\)"):
        LiberoFramesEnv(eps, None)
    env = LiberoFramesEnv(eps, L.frame_questions)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0, options={"episode": 1})
    assert obs["agentview"].shape == (8, 8, 3) and obs["instruction"].startswith("put both")
    assert [q.id.rsplit("/", 1)[1] for q in info["questions"]] == list(L.QUESTION_TYPES)
    assert info["step"] == 0 and info["episode"] == "demo_1" and info["candidates"] == list(info["questions"][0].candidates)
    steps = [env.step(0) for _ in range(2)]
    assert [s[4]["step"] for s in steps] == [15, 30] and steps[-1][2] is True
    with pytest.raises(ValueError, match="options\\['episode'\\]"):
        env.reset(options={"episode": 9})
    assert isinstance(env, gymnasium.Env)


def test_run_qa_end_to_end(tmp_path, fake_scorer):
    if not L.DEFAULT_FILE.exists():
        pytest.skip("shipped set not rendered")
    from hydra import compose, initialize_config_dir

    from jetgym.questions.libero_report import write_libero_report
    from jetgym.questions.sets import load_question_set
    from jetgym.scripts import qa
    from jetgym.scripts.config import to_config

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("qa", overrides=[f"output_dir={tmp_path}", "scorer.name=fake", "dataset=libero", "dataset.limit=24"])
    summary = qa.run_qa(cfg)
    assert summary["requests"] == 24 and summary["dataset"]["name"] == "libero"
    rows = [json.loads(line) for line in (tmp_path / "responses.jsonl").read_text().splitlines()]
    questions = load_question_set(to_config(cfg).dataset)
    report = write_libero_report(questions, rows, tmp_path)
    assert report["frames"] == 3 and "## LIBERO offline QA" in (tmp_path / "report.md").read_text()


@pytest.mark.skipif(importlib.util.find_spec("libero") is None, reason="the libero extra (simulator) is not installed")
def test_renderer_records_official_layout(tmp_path):
    out = tmp_path / "one.hdf5"
    subprocess.run([sys.executable, "-m", "jetgym.scripts.render_libero", "--out", str(out), "--tasks", "0",
                    "--episodes", "1", "--frames", "3", "--max-steps", "60"], check=True, timeout=600)
    episodes = read_libero(out)
    assert len(episodes) == 1 and len(episodes[0].frames) == 3 and episodes[0].length == 60
