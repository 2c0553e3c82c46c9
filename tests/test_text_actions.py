"""Per-step admissible commands: Text action spaces (or `commands=<info key>`) get their candidate set from
`info["admissible_commands"]` at every step; the agent answers with the command string; vector envs, masks and
steps.jsonl work the same way. A won or truncated step may list no command (episodes, vector envs, cloning, PPO
and rft rollouts); any other step that lists none is an error naming the episode and step. The env is the
small text game of `text_rooms` (and TextWorld when installed)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from gymnasium import spaces  # noqa: E402

import text_rooms  # noqa: E402,F401  (registers TextRooms-v0)
from jetgym.agents import make_agent, rollout  # noqa: E402
from jetgym.agents.base import Act, AgentBase  # noqa: E402
from jetgym.agents.scoring import deterministic, resolve_policy  # noqa: E402
from jetgym.envs.candidates import NO_CANDIDATES, CandidateActions, make_vector_env  # noqa: E402
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
    assert (
        "Observation: You are in the hall. A corridor leads north." in agent.question(obs, info["candidates"]).context
    )


def test_cli_steps_are_logged_by_command(tmp_path):
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    out = tmp_path / "rooms"
    episode_job(
        compose(
            "episode",
            [
                "env=gym",
                "env.id=TextRooms-v0",
                "env.imports=[text_rooms]",
                "agent=random",
                "video=false",
                "episodes=3",
                f"output_dir={out}",
            ],
        ),
        quiet=True,
    )
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert rows and all(r["action"] == r["text"] for r in rows)
    assert {r["text"] for r in rows} <= {"go north", "go south", "look", "take key"}


def test_scorer_rows_carry_probs_by_command(tmp_path, fake_scorer):
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    out = tmp_path / "scored"
    episode_job(
        compose(
            "episode",
            [
                "env=gym",
                "env.id=text_rooms:TextRooms-v0",
                "scorer.name=fake",
                "video=false",
                "episodes=1",
                f"output_dir={out}",
            ],
        ),
        quiet=True,
    )
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


@pytest.mark.parametrize(
    "listed,message",
    [
        (None, "takes text commands but puts no list in info['moves'] at this step"),
        (
            [],
            "lists no admissible command in info['moves'] at episode 0, step 0 (an env must list at least one command",
        ),
        (["go", ""], "info['moves'] must be a list of non-empty command strings, got ['go', '']"),
        ("go north", "info['moves'] must be a list of non-empty command strings, got 'go north'"),
    ],
)
def test_bad_command_lists_are_errors(listed, message):
    env = CandidateActions(Listing(listed), commands="moves")
    with pytest.raises(ValueError, match=re.escape(message)):
        env.reset(seed=0)


def test_texts_do_not_apply_to_command_envs():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "its candidates are the commands it lists in "
            "info['admissible_commands'] at every step, so texts=/labels= do not apply"
        ),
    ):
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
    assert info["is_success"] is False and not terminated  # not won yet, said at every step (a cut episode: no win)
    agent = make_agent("random")
    episodes = rollout(env, agent, 2, seed=0, progress=False)
    assert [e["length"] for e in episodes] == [5, 5] or any(e["terminated"] for e in episodes)
    env.close()


def test_textworld_observation_is_the_state(textworld_game):
    """Every observation holds the objective, the room and the inventory; the game's answer is `info["feedback"]`, so
    a command that changes nothing (`look`, `examine`) leads back to the same text and the same question."""
    env = gym.make("jetgym/TextWorld-v0", game=str(textworld_game), max_episode_steps=10)
    obs, info = env.reset(seed=0)
    room = obs.split("\n\n")[1]
    assert obs.startswith(info["objective"]) and room.startswith("-= ") and obs.endswith("You are carrying nothing.")
    assert "-= " in info["feedback"]  # the opening text
    looked, _, _, _, info = env.step("look")
    assert looked == obs and info["feedback"].startswith(room.split("\n")[0])
    examine = next(c for c in info["admissible_commands"] if c.startswith("examine "))
    assert env.step(examine)[0] == obs
    opening = next(c for c in info["admissible_commands"] if c.startswith("open "))
    after_open, _, _, _, info = env.step(opening)
    assert after_open != obs and after_open.startswith(info["objective"]) and info["feedback"].startswith("You open")
    assert deterministic(env) and resolve_policy("auto", env) == "untried"
    env.close()


def test_textworld_observation_text_leaves_out_what_is_empty():
    from jetgym.envs.textworld import observation_text

    state = {"objective": "Win.", "description": "-= Hall =-\nA hall.\n\n>", "inventory": "You are carrying nothing."}
    assert observation_text(state) == "Win.\n\n-= Hall =-\nA hall.\n\nYou are carrying nothing."
    assert observation_text({**state, "objective": None}) == "-= Hall =-\nA hall.\n\nYou are carrying nothing."
    assert observation_text({"objective": None, "description": "", "inventory": ""}) == "Nothing happens."


def test_textworld_refuses_a_missing_game(tmp_path):
    pytest.importorskip("textworld")
    missing = tmp_path / "none.z8"
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"env.kwargs.game: no TextWorld game at '{missing}'; make one with")
    ):
        gym.make("jetgym/TextWorld-v0", game=str(missing))


def test_textworld_games_are_picked_by_the_seed(textworld_game, tmp_path, monkeypatch):
    """games=2 from game_seed 3: seed 0 plays game 3 (copied into the cache), seed 1 game 4 (made), seed 2 game 3."""
    import shutil

    from jetgym.envs.textworld import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache_dir().mkdir(parents=True)
    shutil.copy(textworld_game, cache_dir() / "tw-simple-dense-detailed-3.z8")
    env = gym.make("jetgym/TextWorld-v0", game_seed=3, games=2)
    openings = [env.reset(seed=seed)[1]["objective"] for seed in (0, 1, 2)]
    assert openings[0] == openings[2] != openings[1]
    assert (cache_dir() / "tw-simple-dense-detailed-4.z8").is_file()
    env.close()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"games": 0}, "env.kwargs.games must be a whole number >= 1, got 0"),
        (
            {"games": 2, "game": "a.z8"},
            "env.kwargs.games plays tw-simple games made by seed: leave env.kwargs.game null",
        ),
    ],
)
def test_textworld_refuses_bad_games(kwargs, message):
    pytest.importorskip("textworld")
    with pytest.raises(ValueError, match=re.escape(message)):
        gym.make("jetgym/TextWorld-v0", **kwargs)


def test_textworld_cleans_the_banner_and_prompt():
    from jetgym.envs.textworld import clean_text

    raw = "\n\n   ________  __\n  |        \\|  \\\n   \\$$$$$$$$| $$\n\nWelcome!\n\n-= Hall =-\nA hall.\n\n>    -= Hall =-0/1"
    assert clean_text(raw) == "Welcome!\n\n-= Hall =-\nA hall."


def test_commands_must_name_an_info_key():
    with pytest.raises(
        ValueError, match=re.escape("commands must name the info key that lists the admissible commands, got ''")
    ):
        CandidateActions(Listing(["x"]), commands="")


# --- the final step of a game that is over may list no command --------------------------------------------------
class Seeker(AgentBase):
    """Takes the first of `prefer` that is admissible (default: take the key, else go north)."""

    def __init__(self, prefer=("take key", "go north")):
        self.prefer = prefer

    def reset(self, seed=None, slot=0):
        pass

    def act_one(self, observation, candidates, slot):
        index = next(candidates.texts.index(c) for c in self.prefer if c in candidates.texts)
        return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index])


def quiet_rooms(**kwargs):
    return CandidateActions(gym.make("TextRooms-v0", quiet_end=True, **kwargs))


def test_a_won_or_truncated_step_may_list_no_command():
    env = quiet_rooms(moves=2)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("look")
    assert not (terminated or truncated) and info["candidates"].texts == ("go north", "look")
    _, _, terminated, truncated, info = env.step("look")  # the game's own move limit, nothing listed
    assert truncated and not terminated and info["candidates"] is NO_CANDIDATES and env.action_masks().tolist() == []
    won = rollout(quiet_rooms(), Seeker(), 3, seed=0, progress=False)
    assert [(e["return"], e["length"], e["terminated"], e["truncated"]) for e in won] == [(1.0, 3, True, False)] * 3
    cut = rollout(quiet_rooms(moves=2), Seeker(("look",)), 2, seed=0, progress=False)
    assert [(e["length"], e["truncated"]) for e in cut] == [(2, True)] * 2


@pytest.mark.parametrize(
    "mode,autoreset", [("sync", "disabled"), ("sync", "next_step"), ("sync", "same_step"), ("async", "next_step")]
)
def test_vector_envs_play_games_whose_last_step_lists_nothing(mode, autoreset):
    def rows(env, seed):
        return [
            (e["return"], e["length"], e["terminated"])
            for e in rollout(env, make_agent("random"), 5, seed=seed, progress=False)
        ]

    envs = make_vector_env("TextRooms-v0", 2, mode=mode, autoreset=autoreset, quiet_end=True, moves=4)
    try:
        played = rows(envs, 1)
        envs.reset(seed=0)
        for action in ("go north", "go north", "take key"):
            _, _, terminated, _, info = envs.step((action, action))
        if autoreset != "same_step":  # same_step: the info is the next episode's reset
            assert terminated.all() and list(info["candidates"]) == [NO_CANDIDATES] * 2
    finally:
        envs.close()
    assert len(played) == 5 and all(length <= 4 for _, length, _ in played) and any(won for *_, won in played)
    if autoreset == "disabled":  # every episode seeded as in a sequential run
        assert played == rows(quiet_rooms(moves=4), 1)


def test_the_episode_cli_and_cloning_replay_games_whose_last_step_lists_nothing(tmp_path, fake_scorer):
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job
    from jetgym.training.cloning import cloning_questions

    for num_envs in (1, 2):
        out = tmp_path / f"envs-{num_envs}"
        episode_job(
            compose(
                "episode",
                [
                    "env=gym",
                    "env.id=TextRooms-v0",
                    "env.imports=[text_rooms]",
                    "agent=random",
                    "env.kwargs={quiet_end: true, moves: 4}",
                    f"env.num_envs={num_envs}",
                    "video=false",
                    "episodes=4",
                    "seed=1",
                    f"output_dir={out}",
                ],
            ),
            quiet=True,
        )
        rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        assert len({r["episode"] for r in rows}) == 4 and any(r["terminated"] for r in rows)
        env = quiet_rooms(moves=4)
        agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, task="Find the key.")
        questions = cloning_questions(out / "steps.jsonl", env, agent)
        assert len(questions) == len(rows)
        assert [q.candidates[q.gold] for q in questions] == [
            r["text"] for r in sorted(rows, key=lambda r: (r["episode"], r["step"]))
        ]


def tiny_text_run(num_envs=2, **rooms):
    from test_training import tiny_scorer
    from jetgym.training.options import LoraOptions
    from jetgym.training.policy import Policy

    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    agent = make_agent(
        "scorer", scorer=policy.scorer, task="Find the key.", describer=lambda o: o[:12], policy="sample"
    )
    return policy, [quiet_rooms(**rooms) for _ in range(num_envs)], agent


def test_ppo_rollouts_and_updates_take_games_whose_last_step_lists_nothing():
    import torch

    from jetgym.training.options import PPOOptions
    from jetgym.training.ppo import Rollouts, update

    policy, envs, agent = tiny_text_run(moves=2)
    envs[1] = CandidateActions(gym.make("TextRooms-v0", quiet_end=True, max_episode_steps=2))  # cut by a time limit
    rollouts = Rollouts(envs, agent, lambda k, j: 10 * k + j)
    collected = rollouts.collect(5)
    quiet, cut = ([s for s in steps if s.terminated or s.truncated] for steps in collected.steps)
    assert len(quiet) == len(cut) == 2 and len(collected.episodes) == 4
    assert all(s.truncated and s.after is None for s in quiet)  # the game is over: nothing to bootstrap
    assert all(s.truncated and s.after is not None and "look" in s.after.candidates for s in cut)  # bootstraps
    options = PPOOptions(num_envs=2, rollout_steps=5, minibatch=5, epochs=1, learning_rate=0.01)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=options.learning_rate)
    losses = update(policy, optimizer, collected, options, torch.Generator().manual_seed(0))
    assert all(np.isfinite(value) for value in losses.values())


def test_rft_rounds_take_games_whose_last_step_lists_nothing():
    from jetgym.training import rft
    from jetgym.training.options import RFTOptions

    policy, envs, agent = tiny_text_run(moves=4)
    played = rft.play_round(
        envs,
        agent,
        policy.scorer,
        [5, 6],
        RFTOptions(group=2, seeds_per_round=2, num_envs=2),
        temperature=1.0,
        episode_seed=0,
    )
    assert len(played) == 4 and all(1 <= len(e.decisions) <= 4 for e in played)


def test_a_step_that_needs_an_action_and_lists_nothing_names_the_episode_and_step(monkeypatch):
    monkeypatch.setitem(text_rooms.COMMANDS, 1, [])  # the corridor lists nothing, and the game goes on
    env = rooms()
    for _ in range(3):
        env.reset(seed=0)
    for _ in range(4):
        env.step("look")
    message = (
        "TextRooms-v0 lists no admissible command in info['admissible_commands'] at episode 2, step 5 (an env "
        "must list at least one command on every step that is not terminated or truncated)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        env.step("go north")
    with pytest.raises(ValueError, match=re.escape("info['admissible_commands'] at episode 0, step 1 (an env must")):
        rollout(rooms(), Seeker(), 1, progress=False)
    envs = make_vector_env("TextRooms-v0", 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=re.escape("at episode 0, step 1 (an env must list at least one command")):
            envs.step(("go north", "look"))
    finally:
        envs.close()


def test_fresh_rooms_hardly_repeat_and_the_draught_leads_out():
    env = gym.make("FreshRooms-v0")
    seen = set()
    for seed in range(50):
        text, info = env.reset(seed=seed)
        for _ in range(3):
            seen.add(text)
            way = text.rsplit("from the ", 1)[1].rstrip(".")
            assert f"go {way}" in info["admissible_commands"]
            text, reward, terminated, _, info = env.step(f"go {way}")
        assert (reward, terminated, info["admissible_commands"]) == (1.0, True, [])
    assert len(seen) >= 140  # of 150 rooms drawn
    _, info = env.reset(seed=0)
    wrong = next(c for c in info["admissible_commands"] if c != f"go {env.unwrapped.way}")
    assert env.step(wrong)[1:3] == (0.0, True)
