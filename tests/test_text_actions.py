"""Per-step admissible commands: Text action spaces (or `commands=<info key>`) get their candidate set from
`info["admissible_commands"]` at every step; the agent answers with the command string; vector envs, masks and
steps.jsonl work the same way. The env is the small text game of `text_rooms` (and TextWorld when installed)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from gymnasium import spaces  # noqa: E402

import text_rooms  # noqa: E402,F401  (registers TextRooms-v0)
from jetgym.agents import make_agent, rollout  # noqa: E402
from jetgym.envs.candidates import CandidateActions, make_vector_env  # noqa: E402
from jetgym.scorers import make_scorer  # noqa: E402


def rooms():
    return CandidateActions(gym.make("TextRooms-v0"))


def test_candidates_follow_the_command_list_at_every_step():
    env = rooms()
    obs, info = env.reset(seed=0)
    assert info["candidates"].texts == ("go north", "look") == info["candidates"].actions == info["candidates"].labels
    assert "action_mask" not in info and env.action_masks().tolist() == [1, 1]
    obs, _, _, _, info = env.step("go north")
    assert info["candidates"].texts == ("go north", "go south", "look") and env.action_masks().tolist() == [1, 1, 1]
    obs, _, _, _, info = env.step("go north")
    assert info["candidates"].texts == ("take key", "go south", "look")
    _, reward, terminated, _, _ = env.step("take key")
    assert reward == 1.0 and terminated


def test_the_agent_answers_with_the_command_string(fake_scorer):
    env = rooms()
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, task="Find the key.")
    obs, info = env.reset(seed=0)
    agent.reset(0)
    act = agent.act(obs, info["candidates"])
    assert act.action in ("go north", "look") and act.action == act.text == act.label
    assert "Observation: You are in the hall. A corridor leads north." in agent.question(obs, info["candidates"]).context


def test_cli_steps_are_logged_by_command(tmp_path):
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import run_episodes

    out = tmp_path / "rooms"
    run_episodes(compose("episode", ["env=gym", "env.id=TextRooms-v0", "env.imports=[text_rooms]", "agent=random",
                                     "video=false", "episodes=3", f"output_dir={out}"]), quiet=True)
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert rows and all(r["action"] == r["text"] for r in rows)
    assert {r["text"] for r in rows} <= {"go north", "go south", "look", "take key"}


def test_scorer_rows_carry_probs_by_command(tmp_path, fake_scorer):
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import run_episodes

    out = tmp_path / "scored"
    run_episodes(compose("episode", ["env=gym", "env.id=text_rooms:TextRooms-v0", "scorer.name=fake", "video=false",
                                     "episodes=1", f"output_dir={out}"]), quiet=True)
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert set(rows[0]["probs"]) == {"go north", "look"}
    assert abs(sum(rows[0]["probs"].values()) - 1) < 1e-6


@pytest.mark.parametrize("mode,autoreset", [("sync", "disabled"), ("sync", "next_step"), ("async", "disabled")])
def test_vector_env_plays_as_one_env_at_a_time(mode, autoreset, fake_scorer):
    def rows(env):
        agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, policy="sample", task="Find the key.")
        return [(e["return"], e["length"]) for e in rollout(env, agent, 5, seed=2, progress=False)]

    single = rows(rooms())
    envs = make_vector_env("TextRooms-v0", 3, mode=mode, autoreset=autoreset)
    try:
        played = rows(envs)
    finally:
        envs.close()
    if autoreset == "disabled":  # every episode seeded as in a sequential run
        assert played == single
    else:
        assert len(played) == 5 and all(length <= 12 for _, length in played)


class Listing(gym.Env):
    """A Discrete-action env that also lists string commands in `info["moves"]`."""

    def __init__(self, listed):
        self.observation_space, self.action_space, self.listed = spaces.Discrete(2), spaces.Discrete(2), listed

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {"moves": self.listed}

    def step(self, action):
        return 0, 0.0, True, False, {"moves": self.listed}


def test_commands_key_turns_any_env_into_a_command_env():
    env = CandidateActions(Listing(["wait", "wait", "jump"]), commands="moves")
    assert env.reset(seed=0)[1]["candidates"].texts == ("wait", "jump")  # distinct, in the env's order


@pytest.mark.parametrize("listed,message", [
    (None, "takes text commands but puts no list in info['moves'] at this step"),
    ([], "lists no admissible command in info['moves'] at this step"),
    (["go", ""], "info['moves'] must be a list of non-empty command strings, got ['go', '']"),
    ("go north", "info['moves'] must be a list of non-empty command strings, got 'go north'"),
])
def test_bad_command_lists_are_errors(listed, message):
    env = CandidateActions(Listing(listed), commands="moves")
    with pytest.raises(ValueError, match=re.escape(message)):
        env.reset(seed=0)


def test_texts_do_not_apply_to_command_envs():
    with pytest.raises(ValueError, match=re.escape("its candidates are the commands it lists in "
                                                   "info['admissible_commands'] at every step, so texts=/labels= do not apply")):
        CandidateActions(gym.make("TextRooms-v0"), texts=["go north"])


def test_other_action_spaces_point_to_commands():
    class Boxed(Listing):
        def __init__(self):
            super().__init__(["x"])
            self.action_space = spaces.MultiDiscrete([2, 2])

    with pytest.raises(TypeError, match=re.escape("needs a Discrete or Text action space, got MultiDiscrete([2 2])")):
        CandidateActions(Boxed())


# --- TextWorld ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def textworld_game(tmp_path_factory):
    pytest.importorskip("textworld")
    from jetgym.envs.textworld import make_game

    return make_game(tmp_path_factory.mktemp("tw") / "simple.z8", game_seed=3)  # tw-make, ~15 s


def test_textworld_game_gives_commands_and_scores(textworld_game):
    env = CandidateActions(gym.make("jetgym/TextWorld-v0", game=str(textworld_game), max_episode_steps=5))
    obs, info = env.reset(seed=0)
    assert "TextWorld" in obs and not obs.lstrip().startswith("_") and ">" not in obs.splitlines()[-1]
    first = info["candidates"].texts
    assert "look" in first and info["max_score"] > 0
    opening = next((c for c in first if c.startswith("open ")), first[0])
    obs, reward, terminated, truncated, info = env.step(opening)
    assert isinstance(obs, str) and reward >= 0 and info["candidates"].texts != ()
    agent = make_agent("random")
    episodes = rollout(env, agent, 2, seed=0, progress=False)
    assert [e["length"] for e in episodes] == [5, 5] or any(e["terminated"] for e in episodes)
    env.close()


def test_textworld_refuses_a_missing_game(tmp_path):
    pytest.importorskip("textworld")
    missing = tmp_path / "none.z8"
    with pytest.raises(FileNotFoundError, match=re.escape(f"env.kwargs.game: no TextWorld game at '{missing}'; make one with")):
        gym.make("jetgym/TextWorld-v0", game=str(missing))


def test_textworld_cleans_the_banner_and_prompt():
    from jetgym.envs.textworld import clean_text

    raw = "\n\n   ________  __\n  |        \\|  \\\n   \\$$$$$$$$| $$\n\nWelcome!\n\n-= Hall =-\nA hall.\n\n>    -= Hall =-0/1"
    assert clean_text(raw) == "Welcome!\n\n-= Hall =-\nA hall."


def test_commands_must_name_an_info_key():
    with pytest.raises(ValueError, match=re.escape("commands must name the info key that lists the admissible commands, got ''")):
        CandidateActions(Listing(["x"]), commands="")
