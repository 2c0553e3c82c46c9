"""The ViZDoom env: env checker, action table, visible-only observations, crash recovery, clean processes."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

pytest.importorskip("vizdoom")
gym = pytest.importorskip("gymnasium")

import jetgym.envs  # noqa: E402
from jetgym.envs.vizdoom.env import BUTTONS, CONTROLS, SCENARIOS, DoomEnv, engine_processes  # noqa: E402


def process_gone(pid: int) -> bool:
    """True when `pid` no longer exists or is not a live process (a reaped child)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            stat = file.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


@pytest.fixture(autouse=True)
def no_stray_engines():
    before = engine_processes()
    yield
    assert engine_processes() <= before, "a test left a vizdoom engine running"


@pytest.fixture
def env():
    environment = DoomEnv("defend_the_center", frame_skip=4, episode_timeout=60)
    yield environment
    environment.close()


def test_registered_ids_make_lazily():
    assert set(jetgym.envs.DOOM_IDS) <= set(gym.registry)
    assert set(jetgym.envs.DOOM_IDS.values()) == set(SCENARIOS)
    made = gym.make("jetgym/DoomBasic-v0", frame_skip=2)
    try:
        assert made.unwrapped.scenario_name == "basic" and made.unwrapped.frame_skip == 2
        assert made.unwrapped.engine_pid is None  # no engine until reset
    finally:
        made.close()


def test_env_checker_passes(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env, skip_render_check=False)


def test_action_table_matches_buttons_by_name(env):
    assert [c.label for c in CONTROLS] == [
        "noop",
        "move_forward",
        "move_backward",
        "turn_left",
        "turn_right",
        "strafe_left",
        "strafe_right",
        "attack",
        "use",
    ]
    expected = {
        "noop": set(),
        "move_forward": {"MOVE_FORWARD"},
        "move_backward": {"MOVE_BACKWARD"},
        "turn_left": {"TURN_LEFT"},
        "turn_right": {"TURN_RIGHT"},
        "strafe_left": {"MOVE_LEFT"},
        "strafe_right": {"MOVE_RIGHT"},
        "attack": {"ATTACK"},
        "use": {"USE"},
    }
    for order in (list(BUTTONS), list(reversed(BUTTONS))):  # any engine order maps by name
        for control, vector in zip(CONTROLS, DoomEnv.action_vectors(order)):
            assert {b for b, v in zip(order, vector) if v} == expected[control.label]
    env.reset(seed=0)
    engine = [str(b).split(".")[-1] for b in env._game.get_available_buttons()]
    assert sorted(engine) == sorted(BUTTONS)  # overridden in every scenario
    assert env._action_vectors == DoomEnv.action_vectors(engine)
    with pytest.raises(RuntimeError, match="expected"):
        DoomEnv.action_vectors(["TURN_LEFT", "TURN_RIGHT", "ATTACK"])


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_observation_is_screen_and_visible_status_only(scenario):
    environment = DoomEnv(scenario, episode_timeout=20)
    try:
        obs, info = environment.reset(seed=1)
        assert set(obs) == {"screen", "status"}
        assert obs["screen"].shape == (100, 160, 3) and obs["screen"].dtype == np.uint8
        assert tuple(obs["status"]) == SCENARIOS[scenario].status
        assert environment.observation_space.contains(obs)
        game = environment._game
        for hidden in ("depth_buffer", "labels_buffer", "automap_buffer", "objects_info", "sectors_info"):
            assert not getattr(game, f"is_{hidden}_enabled")(), hidden
        assert set(info) == {"engine_restarts", "status"} and info["status"] == obs["status"]
        assert info["status"] is not obs["status"]  # a copy: editing one never changes the other
    finally:
        environment.close()


def test_status_values_follow_the_game(env):
    obs, _ = env.reset(seed=3)
    assert {k: int(v) for k, v in obs["status"].items()} == {"health": 100, "ammo": 26, "kills": 0}
    attack = [c.label for c in CONTROLS].index("attack")
    for _ in range(4):
        obs, *_ = env.step(attack)
    assert int(obs["status"]["ammo"]) < 26


def test_timeout_truncates_with_reason(env):
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(0)
        done, steps = terminated or truncated, steps + 1
    assert truncated and not terminated and info["truncated_reason"] == "episode timeout"
    assert steps == 15  # 60 tics / frame skip 4


def test_seeded_episodes_repeat(env):
    def play(seed):
        obs, _ = env.reset(seed=seed)
        screens = [obs["screen"]]
        for action in [3, 7, 4, 7, 1, 7, 0, 7]:
            obs, *_ = env.step(action)
            screens.append(obs["screen"])
        return np.stack(screens)

    assert np.array_equal(play(11), play(11))


def test_engine_crash_truncates_and_restarts(env):
    env.reset(seed=0)
    env.step(7)
    first = env.engine_pid
    assert first is not None and not process_gone(first)
    os.kill(first, signal.SIGKILL)
    obs, reward, terminated, truncated, info = env.step(7)
    assert truncated and not terminated and reward == 0.0
    assert info["truncated_reason"].startswith("engine crash")
    assert env.observation_space.contains(obs)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    obs, info = env.reset(seed=0)  # a fresh engine
    assert info["engine_restarts"] == 1 and env.engine_pid not in (None, first)
    assert process_gone(first)
    _, _, _, truncated, _ = env.step(0)
    assert not truncated
    second = env.engine_pid
    env.close()
    assert process_gone(second) and env.engine_pid is None


def test_crash_between_episodes_is_survived(env):
    env.reset(seed=0)
    os.kill(env.engine_pid, signal.SIGKILL)
    obs, info = env.reset(seed=1)  # new_episode fails on the dead engine: restart and retry
    assert info["engine_restarts"] == 1 and env.observation_space.contains(obs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"scenario": "defend_the_centre"},
            r"unknown ViZDoom scenario \(env.kwargs.scenario\) 'defend_the_centre'; known: basic, .*defend_the_center",
        ),
        ({"frame_skip": 0}, "frame_skip must be >= 1"),
        ({"episode_timeout": 0}, "episode_timeout must be >= 1"),
        ({"render_mode": "human"}, "unknown render_mode 'human'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DoomEnv(**kwargs)


def test_step_before_reset_and_bad_action(env):
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="invalid action 9"):
        env.step(9)


RUNNER = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a shell ignores SIGINT for `cmd &`
from jetgym.envs.vizdoom.env import DoomEnv
env = DoomEnv("basic", frame_skip=4)
env.reset(seed=0)
print(env.engine_pid, flush=True)
time.sleep(120)
"""


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return process_gone(pid)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=["SIGTERM", "SIGKILL", "SIGINT"])
def test_engine_dies_with_its_runner_however_it_ends(stop):
    import subprocess
    import sys

    runner = subprocess.Popen([sys.executable, "-c", RUNNER], stdout=subprocess.PIPE, text=True)
    try:
        engine = int(runner.stdout.readline())
        assert not process_gone(engine)
        runner.send_signal(stop)
        try:  # SIGINT may be taken by ViZDoom's own signal thread (it closes the game) rather than by Python
            runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            assert stop == signal.SIGINT, f"the runner ignored {stop.name}"
        assert wait_gone(engine, 30.0), f"the vizdoom engine {engine} outlived its runner stopped by {stop.name}"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_clean_close_releases_the_watchdog(env):
    env.reset(seed=0)
    engine, watchdog = env.engine_pid, env._watchdog.process
    env.close()
    assert process_gone(engine) and watchdog.poll() == 0


def test_observations_are_never_shared_objects():
    import warnings

    from gymnasium.utils.passive_env_checker import env_data_reuse_passive_checker

    one_step = DoomEnv("basic", frame_skip=4, episode_timeout=1)  # every episode ends on its first step
    try:
        first = one_step.reset(seed=0)
        *second, truncated, info = one_step.step(0)
        assert truncated
        assert not np.shares_memory(first[0]["screen"], second[0]["screen"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env_data_reuse_passive_checker(first, (second[0], info), "reset", "step")
            env_data_reuse_passive_checker((second[0], info), one_step.reset(seed=1), "step", "reset")
        second[0]["screen"][:] = 7  # a caller's edit never reaches the env
        assert not np.array_equal(one_step._last_obs["screen"], second[0]["screen"])
    finally:
        one_step.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_stopping_jetgym_episode_leaves_no_engine(tmp_path, stop):
    import subprocess
    import sys
    import time

    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jetgym.scripts.episode",
            "agent=random",
            "episodes=1000",
            "video=false",
            f"output_dir={tmp_path}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while not engine_processes(runner.pid) and time.monotonic() < deadline and runner.poll() is None:
            time.sleep(0.1)
        engines = engine_processes(runner.pid)
        assert engines, "jetgym-episode started no engine"
        time.sleep(0.5)  # a few steps in
        runner.send_signal(stop)
        runner.wait(timeout=10)
        assert all(wait_gone(pid) for pid in engines), (
            f"engine(s) {engines} outlived jetgym-episode stopped by {stop.name}"
        )
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
