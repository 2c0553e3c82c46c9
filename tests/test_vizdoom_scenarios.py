"""ViZDoom beyond the four tuned scenarios: every bundled cfg by name, a user's own cfg (its .wad beside it),
status from the cfg's available_game_variables, the briefing, and the refusals with the engine's message."""

from __future__ import annotations

import os
import re
import shutil

import pytest

pytest.importorskip("vizdoom")
gym = pytest.importorskip("gymnasium")

import jetgym.envs  # noqa: E402,F401  (registers the ids)
from jetgym.envs.vizdoom.env import (  # noqa: E402
    CONTROLS,
    NEUTRAL_BRIEFING,
    SCENARIOS,
    UNPLAYABLE,
    DoomEnv,
    bundled_scenarios,
    scenarios_dir,
)


def user_scenario(folder, variables: str = "HEALTH KILLCOUNT AMMO2", extra: str = "") -> str:
    """A user's cfg in its own folder: basic's map copied as my_map.wad, named relatively."""
    shutil.copy(os.path.join(scenarios_dir(), "basic.wad"), folder / "my_map.wad")
    cfg = folder / "my.cfg"
    cfg.write_text(
        f"doom_scenario_path = my_map.wad\nepisode_timeout = 100\navailable_game_variables = {{ {variables} }}\n"
        f"available_buttons = {{ ATTACK }}\n{extra}"
    )
    return str(cfg)


def play(env, steps: int = 3):
    obs, info = env.reset(seed=0)
    for action in range(steps):
        obs, reward, terminated, truncated, info = env.step(action)
    return obs


def test_every_bundled_cfg_is_listed():
    names = bundled_scenarios()
    assert (
        set(SCENARIOS) <= set(names)
        and "defend_the_line" in names
        and len(names) == len([n for n in os.listdir(scenarios_dir()) if n.endswith(".cfg")])
    )


def test_a_bundled_scenario_by_name_shows_its_cfg_variables():
    env = gym.make("jetgym/Doom-v0", scenario="defend_the_line", episode_timeout=40)
    try:
        obs = play(env)
        assert list(obs["status"]) == ["ammo2", "health"] and int(obs["status"]["health"]) > 0
        assert env.unwrapped.task == NEUTRAL_BRIEFING and env.action_space.n == len(CONTROLS) == 9
    finally:
        env.close()


def test_the_tuned_scenarios_keep_their_status_and_briefing_unless_given():
    env = DoomEnv("basic", briefing="Shoot the monster.")
    assert env.scenario.status == SCENARIOS["basic"].status and env.task == "Shoot the monster."
    assert DoomEnv("basic").task == SCENARIOS["basic"].briefing


def test_a_users_cfg_with_its_wad_beside_it(tmp_path):
    env = gym.make("jetgym/Doom-v0", config=user_scenario(tmp_path), briefing="Kill the monster in the room.")
    try:
        obs = play(env)
        assert list(obs["status"]) == ["health", "kills", "ammo2"]
        assert env.unwrapped.scenario_name == "my" and env.unwrapped.task == "Kill the monster in the room."
        assert env.action_space.n == 9  # the nine controls stay, whatever buttons the cfg lists
    finally:
        env.close()


def test_a_cfg_without_variables_shows_health(tmp_path):
    env = DoomEnv(config=user_scenario(tmp_path, variables=""))
    assert env.scenario.status == ("health",) and env.task == NEUTRAL_BRIEFING


def test_the_cli_plays_a_users_cfg(tmp_path):
    import json

    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    cfg = user_scenario(tmp_path)
    out = tmp_path / "run"
    episode_job(
        compose(
            "episode",
            [
                "env=doom",
                f"env.kwargs.config={cfg}",
                "env.kwargs.episode_timeout=20",
                "agent=random",
                "video=false",
                f"output_dir={out}",
            ],
        ),
        quiet=True,
    )
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert rows and set(rows[0]["status"]) == {"health", "kills", "ammo2"}


def test_a_cfg_the_engine_cannot_load_is_refused_with_its_message(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("this is { not a cfg\n")
    with pytest.raises(ValueError, match=re.escape(f"ViZDoom cannot load the config {bad}: ")) as error:
        DoomEnv(config=str(bad))
    assert "Syntax error in line #1" in str(error.value)  # the engine's own words


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing", "env.kwargs.config: no ViZDoom config at {folder}/nowhere.cfg"),
        (
            "no_wad",
            "the ViZDoom config {folder}/my.cfg names doom_scenario_path {folder}/my_map.wad, which does not exist: put the .wad beside the cfg",
        ),
        ("no_iwad", "names doom_game_path {folder}/mygame.wad, which does not exist"),
    ],
)
def test_missing_files_are_named(tmp_path, case, message):
    if case == "missing":
        config = tmp_path / "nowhere.cfg"
    else:
        config = user_scenario(tmp_path, extra="doom_game_path = mygame.wad\n" if case == "no_iwad" else "")
        if case == "no_wad":
            os.remove(tmp_path / "my_map.wad")
    with pytest.raises((ValueError, FileNotFoundError), match=re.escape(message.format(folder=tmp_path))):
        DoomEnv(config=str(config))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"scenario": "defend_the_lines"}, "unknown ViZDoom scenario (env.kwargs.scenario) 'defend_the_lines'"),
        ({"scenario": "cig"}, "the bundled ViZDoom scenario 'cig' cannot be played here: a multiplayer map"),
        (
            {"scenario": "basic", "config": "/x/my.cfg"},
            "give env.kwargs.scenario ('basic') or env.kwargs.config ('/x/my.cfg'), not both",
        ),
        ({"briefing": "  "}, "env.kwargs.briefing must be a non-empty text or null, got '  '"),
    ],
)
def test_bad_scenario_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        DoomEnv(**kwargs)


def test_a_named_id_with_a_users_cfg_points_to_env_doom(tmp_path):
    with pytest.raises(ValueError, match=re.escape("play your own cfg with env=doom (jetgym/Doom-v0)")):
        gym.make("jetgym/DoomBasic-v0", config=user_scenario(tmp_path))


def test_unplayable_ones_are_bundled():
    assert set(UNPLAYABLE) <= set(bundled_scenarios())
