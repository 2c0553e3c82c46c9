"""`jetgym-episode`: configs compose and validate; seeded runs repeat byte for byte; outputs are complete."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

pytest.importorskip("vizdoom")
pytest.importorskip("gymnasium")

from jetgym.scripts.config import EpisodeConfig, compose, to_config  # noqa: E402
from jetgym.scripts.episode import EPISODES, STEPS, SUMMARY, REPORT, episode_job  # noqa: E402

from test_configs import options  # noqa: E402


def compose_episode(overrides=()):
    return compose("episode", overrides)


def test_groups():
    assert options("env") == [
        "babyai_goto_local_train",
        "babyai_goto_obj",
        "babyai_goto_red_ball_grey",
        "babyai_pickup_loc",
        "basic",
        "deadly_corridor",
        "defend_the_center",
        "doom",
        "frozenlake",
        "gym",
        "health_gathering",
        "minigrid_doorkey_5x5",
        "minigrid_empty_5x5",
        "taxi",
        "textworld",
    ]
    assert options("agent") == ["fixed", "random", "scorer", "scripted"]


@pytest.mark.parametrize("env,agent", list(itertools.product(options("env"), options("agent"))))
def test_every_env_agent_pair_composes(env, agent):
    if env.startswith(("babyai", "minigrid")):
        pytest.importorskip("minigrid")
    named = ["env.id=CartPole-v1"] if env == "gym" else []  # the generic config names no env
    config = to_config(compose_episode([f"env={env}", f"agent={agent}", *named]))
    assert isinstance(config, EpisodeConfig) and config.agent.name == agent
    assert config.env.id.startswith(("jetgym/Doom", "jetgym/BabyAI", "minigrid:")) or env in (
        "frozenlake",
        "gym",
        "taxi",
        "textworld",
    )


def test_defaults():
    config = to_config(compose_episode())
    assert (config.env.id, config.agent.name, config.agent.perception) == (
        "jetgym/DoomDefendTheCenter-v0",
        "scorer",
        "describe",
    )
    assert config.scorer.template is None and config.model.spec == "smollm2-135m-instruct"  # the scorer's own: chat
    assert config.env.kwargs == {"frame_skip": 4, "episode_timeout": None}


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "env.id=jetgym/DoomDefendTheCentre-v0",
            "unknown env.id 'jetgym/DoomDefendTheCentre-v0': not a registered Gymnasium id. Did you mean 'jetgym/DoomDefendTheCenter-v0'",
        ),
        ("agent.name=smart", "unknown agent.name 'smart'; known: fixed, random, scorer, scripted"),
        (
            "env.examples=[[seen]]",
            "env.examples[0] must be an [observation text, control text] pair of non-empty texts",
        ),
        ("agent.control=attack", "agent.control is the fixed agent's control: set it with agent=fixed"),
        ("agent.aim=strafe", "agent.aim is the scripted agent's steering: set it with agent=scripted"),
        ("agent.perception=vision", "unknown agent.perception 'vision'"),
        ("agent.policy=greedy", "unknown agent.policy 'greedy'"),
        ("agent.temperature=0", "agent.temperature must be > 0"),
        ("agent.memory=-1", "agent.memory must be >= 0"),
        ("episodes=0", "episodes must be >= 1"),
    ],
)
def test_bad_values_fail_validation(override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        to_config(compose_episode([override]))


@pytest.mark.parametrize(
    "override", ["env.frame_skp=2", "env.kwarg.frame_skip=2", "agent.memroy=3", "env=defend_the_centre", "agent=smart"]
)
def test_misspelt_keys_and_groups_fail_at_composition(override):
    with pytest.raises(ConfigCompositionException):
        compose_episode([override])


def short_run(tmp_path: Path, name: str, *overrides: str) -> Path:
    out = tmp_path / name
    cfg = compose_episode(["env.kwargs.episode_timeout=48", "episodes=2", "seed=7", f"output_dir={out}", *overrides])
    episode_job(cfg, quiet=True)
    return out


def test_seeded_fake_scorer_episodes_repeat(tmp_path, fake_scorer):
    first = short_run(tmp_path, "a", "scorer.name=fake")
    second = short_run(tmp_path, "b", "scorer.name=fake")
    steps = (first / STEPS).read_bytes()
    assert steps == (second / STEPS).read_bytes()
    rows = [json.loads(line) for line in steps.decode().splitlines()]
    assert [r["seed"] for r in rows] == [7] * 12 + [8] * 12  # 48 tics / frame skip 4, two episodes
    assert all(abs(sum(r["probs"].values()) - 1) < 1e-9 and r["action"] in r["probs"] for r in rows)
    assert set(rows[0]["status"]) == {"health", "ammo", "kills"}
    episodes = [json.loads(line) for line in (first / EPISODES).read_text().splitlines()]
    assert [e["length"] for e in episodes] == [12, 12] and all(e["end"] == "episode timeout" for e in episodes)
    assert episodes[0]["return"] == sum(r["reward"] for r in rows if r["episode"] == 0)
    summary = json.loads((first / SUMMARY).read_text())
    assert summary["scorer"]["name"] == "fake" and summary["episodes"] == 2 and summary["decisions"] == 24
    assert summary["agent"]["policy"] == "auto" and summary["agent"]["played_policy"] == "argmax"  # ViZDoom
    assert "| 2 |" in (first / REPORT).read_text()
    from PIL import Image

    with Image.open(first / episodes[0]["video"]) as gif:
        assert gif.format == "GIF" and gif.n_frames == 13 and gif.size == (320, 240)  # 12 decisions + final frame


def test_sampling_and_baselines_repeat(tmp_path, fake_scorer):
    for agent in ("agent=random", "agent=scripted"):
        a = short_run(tmp_path, agent[6:] + "1", agent, "video=false")
        b = short_run(tmp_path, agent[6:] + "2", agent, "video=false")
        assert (a / STEPS).read_bytes() == (b / STEPS).read_bytes()
        assert not list(a.glob("*.gif"))
    sampled = [short_run(tmp_path, f"s{i}", "scorer.name=fake", "agent.policy=sample", "video=false") for i in range(2)]
    assert (sampled[0] / STEPS).read_bytes() == (sampled[1] / STEPS).read_bytes()


def test_fixed_agent_episodes_play_one_control(tmp_path):
    out = short_run(tmp_path, "fixed", "agent=fixed", "agent.control=turn left", "video=false")
    rows = [json.loads(line) for line in (out / STEPS).read_text().splitlines()]
    assert rows and {(row["action"], row["text"]) for row in rows} == {("turn_left", "turn left")}


def test_output_dir_required():
    with pytest.raises(ValueError, match="needs an output folder"):
        episode_job(compose_episode(["output_dir=null"]))


@pytest.mark.slow
def test_embedded_model_plays_a_few_steps(tmp_path):
    """The real embedded model: a distribution over all nine controls at every step."""
    out = tmp_path / "real"
    summary = episode_job(compose_episode(["env.kwargs.episode_timeout=12", f"output_dir={out}"]), quiet=True)
    rows = [json.loads(line) for line in (out / STEPS).read_text().splitlines()]
    assert summary["decisions"] == len(rows) == 3
    assert all(len(r["probs"]) == 9 and abs(sum(r["probs"].values()) - 1) < 1e-6 for r in rows)
    assert summary["scorer"]["scorer"] == "jet"


def test_rerun_into_a_folder_with_results_is_refused(tmp_path, fake_scorer):
    out = short_run(tmp_path, "once", "scorer.name=fake", "video=false")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(FileExistsError, match="already holds episode results .*choose a new output_dir"):
        short_run(tmp_path, "once", "scorer.name=fake", "video=false")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
