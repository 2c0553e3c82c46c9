"""Any registered env from the CLI: `module:EnvId`, `env.imports`, did-you-mean after the imports, `env.kwargs`
in both override forms, the generic `env=gym` config, and the action-text count error."""

from __future__ import annotations

import json
import re
import sys

import pytest

gym = pytest.importorskip("gymnasium")

from jetgym.envs import check_env_id, split_env_id  # noqa: E402
from jetgym.scripts.config import compose, to_config  # noqa: E402


@pytest.fixture
def fresh_import():
    """`third_party_envs` not yet imported (and its id not registered), as in a new process."""
    sys.modules.pop("third_party_envs", None)
    gym.registry.pop("ThirdPartyLine-v0", None)
    yield
    sys.modules.pop("third_party_envs", None)
    gym.registry.pop("ThirdPartyLine-v0", None)


def test_split_env_id():
    assert split_env_id("minigrid:BabyAI-GoToRedBall-v0") == ("minigrid", "BabyAI-GoToRedBall-v0")
    assert split_env_id("jetgym/DoomBasic-v0") == (None, "jetgym/DoomBasic-v0")


def test_module_id_imports_the_package_and_runs_from_the_cli(tmp_path, fresh_import):
    from jetgym.scripts.episode import episode_job

    with pytest.raises(ValueError, match=re.escape("unknown env.id 'ThirdPartyLine-v0'")):
        check_env_id("ThirdPartyLine-v0")  # not imported: not registered
    out = tmp_path / "run"
    episode_job(
        compose(
            "episode",
            [
                "env=gym",
                "env.id=third_party_envs:ThirdPartyLine-v0",
                "agent=random",
                "video=false",
                "episodes=2",
                "env.action_texts=[step left,step right]",
                f"output_dir={out}",
            ],
        ),
        quiet=True,
    )
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert rows and {r["text"] for r in rows} <= {"step left", "step right"}
    assert "third_party_envs" in sys.modules


def test_env_imports_register_before_the_check(fresh_import):
    config = to_config(
        compose(
            "episode",
            [
                "env=gym",
                "env.id=ThirdPartyLine-v0",
                "env.imports=[third_party_envs]",
                "env.action_texts=[step left,step right]",
            ],
        )
    )
    assert config.env.imports == ["third_party_envs"] and "ThirdPartyLine-v0" in gym.registry


def test_did_you_mean_covers_ids_registered_by_the_imports(fresh_import):
    with pytest.raises(ValueError, match=re.escape("Did you mean 'ThirdPartyLine-v0'")):
        check_env_id("third_party_envs:ThirdPartyLne-v0")
    gym.registry.pop("ThirdPartyLine-v0", None)
    sys.modules.pop("third_party_envs", None)
    with pytest.raises(ValueError, match=re.escape("Did you mean 'ThirdPartyLine-v0'")):
        check_env_id("ThirdPartyLne-v0", imports=["third_party_envs"])


def test_unknown_id_without_a_module_says_how_to_name_one():
    with pytest.raises(ValueError, match=re.escape("env.id=<package>:<EnvId>")) as error:
        check_env_id("BabyAI-NoSuchLevel-v0")
    assert "env.imports=[<package>]" in str(error.value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("env.imports=[no_such_env_package]", "env.imports: cannot import 'no_such_env_package'"),
        (
            "env.id=no_such_env_package:Thing-v0",
            "env.id 'no_such_env_package:Thing-v0': cannot import 'no_such_env_package'",
        ),
    ],
)
def test_missing_env_packages_are_named(override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        to_config(compose("episode", ["env=taxi", override]))


def test_missing_minigrid_names_its_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_minigrid(name, *args, **kwargs):
        if name.split(".")[0] == "minigrid":
            raise ModuleNotFoundError("No module named 'minigrid'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_minigrid)
    monkeypatch.delitem(sys.modules, "minigrid", raising=False)
    with pytest.raises(ValueError, match=re.escape("pip install 'jetgym[minigrid]'")):
        check_env_id("minigrid:BabyAI-GoToRedBall-v0")


@pytest.mark.parametrize("job", ["episode", "train"])
@pytest.mark.parametrize(
    "override",
    ["env.kwargs={max_episode_steps: 7}", "env.kwargs.max_episode_steps=7", "+env.kwargs.max_episode_steps=7"],
)
def test_env_kwargs_take_any_key_in_every_form(override, job):
    import jetgym.scripts.train  # noqa: F401  (stores the train schema)

    config = to_config(compose(job, ["env=frozenlake", override]))
    assert config.env.kwargs == {"map_name": "4x4", "is_slippery": True, "max_episode_steps": 7}


def test_env_kwargs_reach_gymnasium_make():
    from jetgym.scripts.episode import make_env

    env = make_env(to_config(compose("episode", ["env=frozenlake", "env.kwargs.max_episode_steps=3"])))
    assert env.spec.max_episode_steps == 3


def test_misspelt_env_keys_still_fail():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose("episode", ["env=frozenlake", "env.kwarg.map_name=8x8"])


def test_generic_gym_config_needs_an_id_and_carries_no_texts():
    with pytest.raises(ValueError, match=re.escape("env.id is empty: set env.id=<a registered Gymnasium id")):
        to_config(compose("episode", ["env=gym"]))
    config = to_config(compose("episode", ["env=gym", "env.id=Taxi-v4"]))
    assert config.env.action_texts is None and config.env.task is None and config.env.kwargs == {}


def test_count_mismatch_names_the_field_the_env_and_the_count():
    from jetgym.scripts.episode import make_env

    config = to_config(compose("episode", ["env=gym", "env.id=Taxi-v4", "env.action_texts=[left,right]"]))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "2 candidate texts for 6 actions: Taxi-v4 has 6 actions, so "
            "env.action_texts (texts= in Python) needs exactly 6 texts"
        ),
    ):
        make_env(config)


def test_blank_import_names_are_refused():
    with pytest.raises(ValueError, match=re.escape("env.imports must hold package names, got ''")):
        check_env_id("Taxi-v4", imports=[""])


CLIFF = ["env=gym", "env.id=CliffWalking-v1", "env.action_texts=[move up,move right,move down,move left]"]


def test_an_env_without_a_time_limit_is_cut_at_the_step_cap_with_a_warning():
    from jetgym.envs.time_limit import STEP_CAP
    from jetgym.scripts.build import make_env

    env = make_env(to_config(compose("episode", CLIFF)))  # CliffWalking ends only at its goal
    env.reset(seed=0)
    with pytest.warns(
        UserWarning,
        match=rf"^CliffWalking-v1 registers no time limit and an episode ran {STEP_CAP} "
        r"steps: it is cut there \(truncated\); set env.kwargs.max_episode_steps=N",
    ):
        ends = [env.step(0)[3] for _ in range(STEP_CAP)]  # always up: never the goal
    assert ends == [False] * (STEP_CAP - 1) + [True]
    vector = make_env(to_config(compose("episode", CLIFF + ["env.num_envs=2"])))
    vector.reset(seed=0)
    with pytest.warns(UserWarning, match="registers no time limit"):
        for _ in range(STEP_CAP):
            truncated = vector.step([0, 0])[3]
    assert truncated.tolist() == [True, True]


def test_a_time_limit_of_the_env_or_the_user_leaves_no_cap():
    from jetgym.envs.time_limit import StepCap
    from jetgym.scripts.build import make_env

    def wrappers(env):
        while hasattr(env, "env"):
            yield type(env)
            env = env.env

    for overrides in (CLIFF + ["env.kwargs.max_episode_steps=5"], ["env=frozenlake"]):
        env = make_env(to_config(compose("episode", overrides)))
        assert StepCap not in set(wrappers(env)), overrides
    assert StepCap in set(wrappers(make_env(to_config(compose("episode", CLIFF)))))
