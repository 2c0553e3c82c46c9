"""Any Gymnasium env: describers, candidate sources, action masks, vector envs, the CLI (fake scorer; no model)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("cv2")

from gymnasium import spaces  # noqa: E402

from jetgym.agents import make_agent, rollout  # noqa: E402
from jetgym.agents.describers import make_describer, number_text  # noqa: E402
from jetgym.envs.vizdoom.text import status_text  # noqa: E402
from jetgym.envs.candidates import CandidateActions, CandidateSet, make_vector_env  # noqa: E402
from jetgym.scorers import make_scorer  # noqa: E402

TAXI_TEXTS = ["move south", "move north", "move east", "move west", "pick up the passenger", "drop off the passenger"]
LAKE_TEXTS = ["move left", "move down", "move right", "move up"]
ENVS_DOC = Path(__file__).resolve().parents[1] / "docs" / "envs.md"


def taxi():
    return CandidateActions(gym.make("Taxi-v4"), texts=TAXI_TEXTS)


class Masked(gym.Env):
    """sb3-contrib style: an `action_masks()` method; action t % 4 is forbidden at step t."""

    observation_space = spaces.Discrete(10)
    action_space = spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.violations = 0, []
        return 0, {}

    def step(self, action):
        if not self.action_masks()[action]:
            self.violations.append((self.t, action))
        self.t += 1
        return self.t, 1.0, self.t >= 8, False, {}

    def action_masks(self):
        mask = np.ones(4, bool)
        mask[self.t % 4] = False
        return mask


class CountingScorer:
    """Passes questions to a scorer and records each `decide_many` call's batch size."""

    def __init__(self, scorer):
        self.scorer, self.calls = scorer, []

    def decide_many(self, questions):
        self.calls.append(len(questions))
        return self.scorer.decide_many(questions)


# --- action masks ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", ["argmax", "sample", "random"])
def test_taxi_masked_actions_are_never_candidates_nor_chosen(agent, fake_scorer):
    env = taxi()
    player = (
        make_agent("random")
        if agent == "random"
        else make_agent("scorer", scorer=make_scorer("fake"), env=env, policy=agent, temperature=3.0)
    )
    masked_seen = 0
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        player.reset(seed)
        for _ in range(40):
            mask, candidates = info["action_mask"], info["candidates"]
            assert mask.dtype == np.int8 and candidates.actions == tuple(int(a) for a in np.flatnonzero(mask))
            assert candidates.texts == tuple(TAXI_TEXTS[a] for a in candidates.actions)  # order kept
            masked_seen += int((mask == 0).sum())
            act = player.act(obs, candidates)
            assert mask[act.action] == 1
            if act.probs is not None:
                assert len(act.probs) == len(candidates.texts) and abs(sum(act.probs) - 1) < 1e-9
            obs, _, terminated, truncated, info = env.step(act.action)
            if terminated or truncated:
                break
    assert masked_seen > 0


def test_action_masks_method_is_honoured_and_published():
    env = CandidateActions(Masked(), texts=["a", "b", "c", "d"])
    obs, info = env.reset(seed=0)
    assert info["candidates"] == CandidateSet(("b", "c", "d"), ("1", "2", "3"), (1, 2, 3))
    assert info["action_mask"].tolist() == [0, 1, 1, 1] and info["action_mask"].dtype == np.int8
    assert env.action_masks().tolist() == [0, 1, 1, 1]
    agent = make_agent("random")
    agent.reset(0)
    for _ in range(8):
        obs, _, terminated, _, info = env.step(agent.act(obs, info["candidates"]).action)
        assert info["action_mask"][obs % 4] == 0 and obs % 4 not in info["candidates"].actions
    assert terminated and env.unwrapped.violations == []


def test_unmasked_env_publishes_all_ones():
    env = CandidateActions(gym.make("FrozenLake-v1"), texts=LAKE_TEXTS)
    _, info = env.reset(seed=0)
    assert info["action_mask"].tolist() == [1, 1, 1, 1] and info["candidates"].texts == tuple(LAKE_TEXTS)


def test_all_masked_and_misshapen_masks_are_errors():
    class NoneAllowed(Masked):
        def action_masks(self):
            return np.zeros(4, bool)

    with pytest.raises(ValueError, match="every action of NoneAllowed is masked at this step"):
        CandidateActions(NoneAllowed(), texts=list("abcd")).reset(seed=0)

    class Short(Masked):
        def action_masks(self):
            return np.ones(3, bool)

    with pytest.raises(ValueError, match=r"action mask has shape \(3,\), the action space has 4 actions"):
        CandidateActions(Short(), texts=list("abcd")).reset(seed=0)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_env_checker_passes_on_wrapped_envs():
    from gymnasium.envs.toy_text import TaxiEnv
    from gymnasium.utils.env_checker import check_env

    check_env(CandidateActions(TaxiEnv(), texts=TAXI_TEXTS), skip_render_check=True)
    check_env(CandidateActions(Masked(), texts=list("abcd")), skip_render_check=True)


# --- candidate texts -----------------------------------------------------------------------------------------
def test_candidate_texts_from_meanings_controls_or_fallback():
    class Atari(Masked):
        def get_action_meanings(self):
            return ["NOOP", "FIRE", "UP_RIGHT", "LEFT"]

    assert CandidateActions(Atari()).candidates.texts == ("noop", "fire", "up right", "left")
    assert CandidateActions(Atari()).candidates.labels == ("NOOP", "FIRE", "UP_RIGHT", "LEFT")
    with pytest.warns(UserWarning, match="no action texts.*'action 0' ... 'action 3'.*env.action_texts"):
        assert CandidateActions(Masked()).candidates.texts == ("action 0", "action 1", "action 2", "action 3")
    with pytest.raises(ValueError, match="3 candidate labels for 4 actions"):
        CandidateActions(Masked(), texts=list("abcd"), labels=list("xyz"))


class Controlled(Masked):
    """An env that names its actions in a `controls` attribute."""

    def __init__(self, controls):
        self.controls = controls


def test_controls_may_be_plain_strings_or_objects_with_text_and_label():
    from collections import namedtuple

    env = CandidateActions(Controlled(["wait", "go left", "go right", "jump"]))
    assert env.candidates.texts == env.candidates.labels == ("wait", "go left", "go right", "jump")
    Control = namedtuple("Control", "label text")
    env = CandidateActions(Controlled(tuple(Control(f"k{i}", f"key {i}") for i in range(4))))
    assert env.candidates.texts == ("key 0", "key 1", "key 2", "key 3") and env.candidates.labels[0] == "k0"
    assert CandidateActions(Controlled([1, 2, 3, 4]), texts=list("abcd")).candidates.texts == tuple("abcd")


@pytest.mark.parametrize(
    "controls,message",
    [
        (
            [1, 2, 3, 4],
            "Controlled.controls must be a list of control texts (strings, or objects with .text and .label), "
            "but holds 1 (int) in [1, 2, 3, 4]",
        ),
        (
            ["wait", "go left", "jump"],
            "Controlled.controls lists 3 controls but the action space Discrete(4) has 4 "
            "actions: give one control per action, in order",
        ),
        (
            "wasd",
            "Controlled.controls must be a list of 4 control texts (strings, or objects with .text and .label), "
            "got 'wasd'",
        ),
        (4, "Controlled.controls must be a list of 4 control texts"),
        (
            ["wait", "go left", "go right", SimpleNamespace(label="j", text="jump")],
            "Controlled.controls mixes strings and objects with .text and .label in ['wait', 'go left', 'go right', "
            "namespace(label='j', text='jump')]: use one kind",
        ),
        (
            ["wait", "", "go right", "jump"],
            "Controlled.controls gives control 1 an empty text in ['wait', '', 'go right', "
            "'jump']: every action needs a text",
        ),
    ],
)
def test_bad_controls_are_one_line_errors(controls, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        CandidateActions(Controlled(controls))
    assert "\n" not in str(error.value)


def test_box_actions_point_to_discretize_action(fake_scorer):
    with pytest.raises(TypeError, match=r"Discrete action space, got Box.*DiscretizeAction\(env, bins=5\)"):
        CandidateActions(gym.make("Pendulum-v1"))
    from gymnasium.wrappers import DiscretizeAction

    env = CandidateActions(
        DiscretizeAction(gym.make("Pendulum-v1", max_episode_steps=3), bins=3),
        texts=["push left", "let go", "push right"],
    )
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, task="Swing the pendulum up.")
    rows = []
    (episode,) = rollout(env, agent, 1, seed=0, on_step=lambda row, frame: rows.append(row), progress=False)
    assert episode["length"] == 3
    assert re.search(
        r"Observation: cos\(angle\) -?\d\.\d+, sin\(angle\) -?\d\.\d+, angular velocity -?\d", rows[0]["question"]
    )


def test_vector_env_is_refused_by_the_wrapper():
    envs = gym.make_vec("FrozenLake-v1", 2)
    with pytest.raises(TypeError, match="wrap each sub-env.*make_vector_env"):
        CandidateActions(envs)
    envs.close()


# --- describers ----------------------------------------------------------------------------------------------
BOX = spaces.Box(-1, 1, (3,), np.float32)


@pytest.mark.parametrize(
    "space,value,text",
    [
        (spaces.Discrete(5), 3, "Observation: 3."),
        (spaces.Discrete(5, start=-2), np.int64(-1), "Observation: -1."),
        (BOX, np.array([0.5, -0.47, 0.1234567], np.float32), "Observation: [0.5, -0.47, 0.1235]."),
        (spaces.Box(-5, 5, (), np.float64), np.float64(-0.47), "Observation: -0.47."),
        (spaces.Box(0, 10, (2, 2), np.int64), np.array([[1, 2], [3, 4]]), "Observation: [[1, 2],\n [3, 4]]."),
        (spaces.MultiDiscrete([3, 4]), np.array([1, 2]), "Observation: [1, 2]."),
        (spaces.MultiBinary(3), np.array([1, 0, 1], np.int8), "Observation: [1, 0, 1]."),
        (spaces.Text(20), "a door to the north", "Observation: a door to the north."),
        (
            spaces.Tuple((spaces.Discrete(3), BOX)),
            (2, np.array([0.25, -0.47, 1e-5], np.float32)),
            "Observation: (2, [0.25, -0.47, 1e-05]).",
        ),
        (
            spaces.Dict(
                {
                    "speed": spaces.Box(-9, 9, (), np.float32),
                    "gear": spaces.Discrete(4),
                    "lights": spaces.Dict({"left": spaces.MultiBinary(1)}),
                }
            ),
            {"speed": np.float32(-0.47), "gear": 2, "lights": {"left": np.array([1])}},
            "Observation: gear 2, lights (left [1]), speed -0.47.",
        ),
    ],
)
def test_each_space_has_a_generic_describer(space, value, text):
    assert make_describer("auto", space)(value) == text


def test_numbers_keep_sensible_precision():
    assert [number_text(v) for v in (np.float32(-0.47), 3, np.int32(7), 2.0, 1234.5678, 1.5e6, -1e-7, True)] == [
        "-0.47",
        "3",
        "7",
        "2",
        "1235",
        "1500000",
        "-1e-07",
        "1",
    ]
    assert (
        status_text({"position": np.float32(-0.47), "health": np.int32(100)}) == "Status: position -0.47, health 100."
    )


def test_named_components_and_images(fake_scorer):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    text = make_describer("box", env=env)(obs)  # the numbers, named; auto reads CartPole in words (below)
    assert text.startswith("Observation: cart position ") and ", pole angular velocity " in text

    class Named(Masked):
        observation_space = spaces.Box(-1, 1, (2,), np.float32)
        observation_names = ("left sensor", "right sensor")

    assert (
        make_describer(env=Named())(np.array([0.1, -0.47], np.float32))
        == "Observation: left sensor 0.1, right sensor -0.47."
    )
    screen = np.zeros((100, 160, 3), np.uint8)
    screen[40:54, 3:7] = (220, 30, 30)
    image = spaces.Box(0, 255, (100, 160, 3), np.uint8)
    assert make_describer("auto", image)(screen) == "Seen on screen: a small thing on the far left."
    with pytest.raises(ValueError, match="needs perception=describe .*or screenshot=true"):
        make_describer("auto", image, perception="none")
    agent = make_agent("scorer", scorer=make_scorer("fake"), observation_space=image, screenshot=True)
    candidates = CandidateSet(("left", "right"), ("l", "r"), (0, 1))
    assert agent.question(screen, candidates).images[0] is screen


def test_env_own_describer_and_callables_win(fake_scorer):
    class Talking(Masked):
        def describe(self, observation):
            return f"You have taken {observation} steps."

    env = CandidateActions(Talking(), texts=list("abcd"))
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env)
    obs, info = env.reset(seed=0)
    assert "\nYou have taken 0 steps.\n" in "\n" + agent.question(obs, info["candidates"]).context

    class Describing(gym.Wrapper):
        def describe(self, observation):
            return "wrapped view"

    agent = make_agent(
        "scorer", scorer=make_scorer("fake"), env=CandidateActions(Describing(Masked()), texts=list("abcd"))
    )
    assert agent.question(0, info["candidates"]).context.startswith("wrapped view\n")
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, describer=lambda o: f"custom {o}")
    assert agent.question(5, info["candidates"]).context.startswith("custom 5\n")


def test_toy_text_describers_read_the_observation_only():
    lake = gym.make("FrozenLake-v1")
    text = make_describer(env=lake)(6)  # row 1, column 2
    assert "\nFHXH\n" in text and "row 1, column 2" in text and "left hole, down frozen, right hole, up frozen" in text
    taxi_env = gym.make("Taxi-v4")
    state = taxi_env.unwrapped.encode(2, 1, 4, 3)  # taxi (2, 1), passenger in the taxi, destination B
    assert make_describer(env=taxi_env)(state) == (
        "The taxi is at row 2, column 1 of the 5x5 grid (row 0 is north, column 0 is west).\n"
        "The passenger is in the taxi.\nThe destination is B (row 4, column 3): 2 rows south and 2 columns east of the taxi."
        "\nNext stop: the destination, 2 rows south and 2 columns east."
    )
    waiting = make_describer(env=taxi_env)(taxi_env.unwrapped.encode(0, 0, 0, 3)).splitlines()  # at R, waiting there
    assert waiting[1:] == [
        "The passenger waits at R (row 0, column 0): at the taxi.",
        "The destination is B (row 4, column 3): 4 rows south and 3 columns east of the taxi.",
        "Next stop: the passenger, right here.",
    ]


def test_cartpole_describer_grades_place_motion_lean_and_swing_in_words():
    describe = make_describer(env=gym.make("CartPole-v1"))  # auto: recognised by the env's id
    assert describe(np.array([0.01, -0.05, 0.003, 0.1], np.float32)) == (
        "The cart is near the centre, almost still. The pole stands upright and is steady."
    )
    assert describe(np.array([-1.0, 0.5, math.radians(-3), 0.6], np.float32)) == (
        "The cart is left of the centre, moving right slowly. The pole leans a little left and is tipping right slowly."
    )
    assert describe(np.array([2.0, -1.5, math.radians(8), -1.2], np.float32)) == (
        "The cart is near the right edge, moving left fast. The pole leans far right and is tipping left fast."
    )
    with pytest.raises(ValueError, match="describer 'cartpole' does not fit"):
        make_describer("cartpole", spaces.Box(-1, 1, (4,)), env=gym.make("MountainCar-v0"))


def test_cliffwalking_describer_says_where_the_goal_and_the_cliff_are():
    describe = make_describer(env=gym.make("CliffWalking-v1"))  # auto: recognised by the env's id
    assert describe(36) == (
        "You are at row 3, column 0 of a 4x12 grid (row 0 is the top, column 0 the left). "
        "The goal is 11 columns right.\nUp: open ground. Right: the cliff. Down: the edge. Left: the edge."
    )
    assert describe(29) == (  # row 2, column 5: the cliff below
        "You are at row 2, column 5 of a 4x12 grid (row 0 is the top, column 0 the left). "
        "The goal is 1 row down and 6 columns right.\nUp: open ground. Right: open ground. Down: the cliff. "
        "Left: open ground."
    )
    assert make_describer("cliffwalking", spaces.Discrete(48))(35).endswith(  # no env: Gymnasium's layout
        "The goal is 1 row down.\nUp: open ground. Right: the edge. Down: the goal. Left: open ground."
    )


def test_env_gym_describes_cliffwalking_in_words():
    from jetgym.scripts.build import build_agent, make_env
    from jetgym.scripts.config import compose, to_config

    texts = "env.action_texts=[move up,move right,move down,move left]"
    config = to_config(compose("episode", ["env=gym", "env.id=CliffWalking-v1", texts]))
    env = make_env(config)
    agent, _ = build_agent(config, scorer=make_scorer("fake"), env=env)
    observation, info = env.reset(seed=0)
    question = agent.question(observation, info["candidates"])
    assert "You are at row 3, column 0 of a 4x12 grid" in question.context and question.candidates[1] == "move right"
    env.close()


def test_describer_errors_name_the_space_and_the_fix():
    with pytest.raises(ValueError, match=r"no describer fits the observation space Graph.*pass describer=<callable"):
        make_describer("auto", spaces.Graph(spaces.Box(0, 1, (2,)), None))
    with pytest.raises(
        ValueError,
        match=r"no describer fits the observation space Box\(0.0, 1.0, \(1000,\), float32\) "
        r"\(1000 numbers are too many to read out\)",
    ):
        make_describer("auto", spaces.Box(0, 1, (1000,)))
    with pytest.raises(ValueError, match="describer 'box' does not fit the observation space Discrete"):
        make_describer("box", spaces.Discrete(3))
    with pytest.raises(LookupError, match="unknown describer 'boxx'.*Did you mean 'box'"):
        make_describer("boxx", spaces.Discrete(3))
    with pytest.raises(ValueError, match="describer 'frozenlake' reads the map from the env"):
        make_describer("frozenlake", spaces.Discrete(16))


def test_agent_without_a_space_infers_it_from_the_first_observation(fake_scorer):
    agent = make_agent("scorer", scorer=make_scorer("fake"), task="T")
    candidates = CandidateSet(("a", "b"), ("a", "b"), (0, 1))
    assert agent.question(np.array([0.5, -0.47]), candidates).context.split("\n")[1] == "Observation: [0.5, -0.47]."


# --- reproducibility and vector envs ------------------------------------------------------------------------
def _rows(env, agent, episodes, seed):
    rows = []
    rollout(env, agent, episodes, seed, on_step=lambda row, frame: rows.append(row), progress=False)
    return rows


def test_fake_scorer_episodes_repeat_per_seed(fake_scorer):
    env = CandidateActions(gym.make("FrozenLake-v1"), texts=LAKE_TEXTS)
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, policy="sample")
    first = _rows(env, agent, 3, seed=5)
    assert first == _rows(env, agent, 3, seed=5) and first != _rows(env, agent, 3, seed=6)


def test_act_many_is_one_call_and_equals_sequential_calls(fake_scorer):
    env = taxi()
    observations, sets = [], []
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        observations.append(obs)
        sets.append(info["candidates"])
    batched = CountingScorer(make_scorer("fake"))
    one_by_one = CountingScorer(make_scorer("fake"))
    agents = [make_agent("scorer", scorer=s, env=env, policy="sample", memory=2) for s in (batched, one_by_one)]
    for agent in agents:
        for slot in range(5):
            agent.reset(slot, slot=slot)
    for _ in range(3):  # memory and sampling state are per slot
        many = agents[0].act_many(observations, sets, slots=range(5))
        single = [agents[1].act(o, c, slot=s) for s, (o, c) in enumerate(zip(observations, sets))]
        assert many == single
    assert batched.calls == [5, 5, 5] and one_by_one.calls == [1] * 15
    with pytest.raises(ValueError, match="slots must be distinct"):
        agents[0].act_many(observations[:2], sets[:2], slots=[1, 1])
    with pytest.raises(ValueError, match="one candidate set and one slot per observation"):
        agents[0].act_many(observations[:2], sets[:1])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_rollout_equals_sequential(mode, fake_scorer):
    single = CandidateActions(gym.make("FrozenLake-v1"), texts=LAKE_TEXTS)
    scorer = CountingScorer(make_scorer("fake"))
    sequential = _rows(single, make_agent("scorer", scorer=scorer, env=single, policy="sample"), 7, seed=3)
    envs = make_vector_env("FrozenLake-v1", 3, texts=LAKE_TEXTS, mode=mode)
    try:
        scorer.calls.clear()
        vector = _rows(envs, make_agent("scorer", scorer=scorer, env=envs, policy="sample"), 7, seed=3)
    finally:
        envs.close()
    assert {r.pop("env") for r in vector} == {0, 1, 2}
    assert sorted(vector, key=lambda r: (r["episode"], r["step"])) == sequential
    assert max(scorer.calls) == 3 and len(scorer.calls) < len(sequential)


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_vector_autoreset_modes(autoreset, fake_scorer):
    envs = make_vector_env("FrozenLake-v1", 2, texts=LAKE_TEXTS, autoreset=autoreset)
    episodes = rollout(envs, make_agent("random"), 5, seed=0, progress=False)
    envs.close()
    single = CandidateActions(gym.make("FrozenLake-v1"), texts=LAKE_TEXTS)
    first = rollout(single, make_agent("random"), 2, seed=0, progress=False)
    assert [e["episode"] for e in episodes] == [0, 1, 2, 3, 4]
    assert [e["seed"] for e in episodes[:2]] == [0, 1] and all(e["seed"] is None for e in episodes[2:])
    assert [(e["return"], e["length"]) for e in episodes[:2]] == [(e["return"], e["length"]) for e in first]


# --- docs/envs.md and CLI -----------------------------------------------------------------------------------------
def readme_example() -> str:
    section = ENVS_DOC.read_text().split("## Any Gymnasium env", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs(fake_scorer, capsys):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 12 and 'make_scorer("jet")' in code
    exec(compile(code.replace('make_scorer("jet")', 'make_scorer("fake")'), "docs/envs.md", "exec"), {})
    assert re.fullmatch(r"\[-?\d+\.0\]\n", capsys.readouterr().out)


def _run(tmp_path: Path, name: str, *overrides: str) -> Path:
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    out = tmp_path / name
    episode_job(compose("episode", [*overrides, f"output_dir={out}"]), quiet=True)
    return out


def test_cli_ready_configs_and_vector_runs(tmp_path, fake_scorer):
    lake = _run(tmp_path, "lake", "env=frozenlake", "scorer.name=fake", "episodes=2", "seed=4")
    rows = [json.loads(line) for line in (lake / "steps.jsonl").read_text().splitlines()]
    assert rows[0]["question"].startswith("Walk from the start S") and "Map (X you" in rows[0]["question"]
    episodes = [json.loads(line) for line in (lake / "episodes.jsonl").read_text().splitlines()]
    assert episodes[0]["video"] == "episode_000.gif" and (lake / "episode_000.gif").exists()
    taxi_rows = _run(tmp_path, "taxi", "env=taxi", "agent=random", "episodes=1", "video=false") / "steps.jsonl"
    assert all(set(json.loads(line)["action"]) for line in taxi_rows.read_text().splitlines())
    vector = _run(
        tmp_path,
        "vec",
        "env=frozenlake",
        "scorer.name=fake",
        "episodes=2",
        "seed=4",
        "env.num_envs=2",
        "env.vectorization=sync",
    )
    vrows = [json.loads(line) for line in (vector / "steps.jsonl").read_text().splitlines()]
    for row in vrows:
        row.pop("env")
    assert sorted(vrows, key=lambda r: (r["episode"], r["step"])) == rows
    summary = json.loads((vector / "summary.json").read_text())
    assert summary["env"]["num_envs"] == 2 and summary["episodes"] == 2 and not list(vector.glob("*.gif"))


def test_cli_any_id(tmp_path):
    out = _run(
        tmp_path,
        "cliff",
        "env=gym",
        "env.id=CliffWalking-v1",
        "agent=random",
        "video=false",
        "env.action_texts=[move up,move right,move down,move left]",
        "+env.kwargs.max_episode_steps=20",
    )
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(rows) <= 20 and {r["text"] for r in rows} <= {"move up", "move right", "move down", "move left"}


@pytest.mark.parametrize(
    "override,message",
    [
        ("env.num_envs=0", "env.num_envs must be >= 1"),
        ("env.vectorization=threads", "unknown env.vectorization 'threads'; known: sync, async"),
        ("agent.describer=boxx", "unknown agent.describer 'boxx'"),
        ("env.id=Taxi-v9", "unknown env.id 'Taxi-v9'"),
    ],
)
def test_cli_bad_values(override, message):
    from jetgym.scripts.config import compose, to_config

    with pytest.raises(ValueError, match=re.escape(message)):
        to_config(compose("episode", ["env=taxi", override]))


class NorthFirst:
    """A memoryless driver: `move north` when admissible, else the last candidate (it loops under walls)."""

    def reset(self, seed=None, slot=0):
        pass

    def act(self, observation, candidates, slot=0):
        from jetgym.agents.base import Act

        index = candidates.texts.index("move north") if "move north" in candidates.texts else len(candidates.texts) - 1
        return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index])


def test_stop_loops_counts_a_proven_loop_exactly_as_playing_it_out():
    """Taxi is deterministic and the driver memoryless: stopping at the first repeated state and repeating the
    loop's rewards to the 200-step limit gives the returns and lengths of the episodes played to the end."""
    texts = ["move south", "move north", "move east", "move west", "pick up", "drop off"]
    env = CandidateActions(gym.make("Taxi-v4"), texts=texts)
    played = rollout(env, NorthFirst(), 6, 30, progress=False)
    stopped = rollout(env, NorthFirst(), 6, 30, progress=False, stop_loops=True)
    assert [(e["return"], e["length"], e["truncated"]) for e in stopped] == [
        (e["return"], e["length"], e["truncated"]) for e in played
    ]
    assert all(e["end"] == "loop" and 0 < e["loop_steps"] < 200 for e in stopped)
    with pytest.raises(ValueError, match="stop_loops plays one env at a time"):
        rollout(make_vector_env("Taxi-v4", 2, texts=texts), NorthFirst(), 2, 0, progress=False, stop_loops=True)
    with pytest.raises(
        ValueError,
        match=r"stop_loops needs an env with a time limit \(gymnasium.make\(..., "
        r"max_episode_steps=N\)\)",
    ):
        rollout(
            CandidateActions(gym.make("Taxi-v4", max_episode_steps=None).unwrapped, texts=texts),
            NorthFirst(),
            1,
            0,
            progress=False,
            stop_loops=True,
        )


def test_errors_inside_a_users_env_are_named_as_the_envs(fake_scorer):
    """Issue 48, item 6: an old 4-tuple step() gave `not enough values to unpack (expected 5, got 4)` and an
    error raised inside step() or an unreadable observation read as jetgym's own."""
    import broken_envs  # noqa: F401  (registers the broken envs)

    from jetgym.envs.candidates import EnvError

    env = CandidateActions(gym.make("BrokenOldStep-v0"), texts=["left", "right"])
    env.reset(seed=0)
    with pytest.raises(EnvError) as caught:
        env.step(1)
    assert str(caught.value) == (
        "BrokenOldStep-v0's step(1) at episode 0, step 0 returned 4 values; Gymnasium's API returns 5: (observation, "
        "reward, terminated, truncated, info) (the old gym API's 4-tuple: split done into terminated and truncated)"
    )
    env = CandidateActions(gym.make("BrokenOldStep-v0", max_episode_steps=9), texts=["left", "right"])
    env.reset(seed=0)
    with pytest.raises(EnvError) as caught:  # gymnasium's TimeLimit unpacks the 4-tuple first
        env.step(1)
    assert str(caught.value) == (
        "BrokenOldStep-v0's step(1) at episode 0, step 0 raised ValueError: not enough values to unpack (expected 5, "
        "got 4) (an error inside the env, not in jetgym; HYDRA_FULL_ERROR=1 shows its traceback); the old gym API's "
        "4-tuple: split done into terminated and truncated"
    )
    env = CandidateActions(gym.make("BrokenRaisingStep-v0"), texts=["left", "right"])
    env.reset(seed=0)
    env.step(0), env.step(1)
    with pytest.raises(EnvError) as caught:
        env.step(1)
    assert str(caught.value) == (
        "BrokenRaisingStep-v0's step(1) at episode 0, step 2 raised KeyError: 'wall' (an error inside the env, not "
        "in jetgym; HYDRA_FULL_ERROR=1 shows its traceback)"
    )
    assert isinstance(caught.value.__cause__, KeyError)

    env = CandidateActions(gym.make("BrokenOddObservation-v0"), texts=["left", "right"])
    agent = make_agent("scorer", scorer=make_scorer("fake"), task="Walk.", env=env)
    observation, info = env.reset(seed=0)
    agent.act(observation, info["candidates"])
    observation, *_, info = env.step(0)
    with pytest.raises(ValueError) as caught:
        agent.act(observation, info["candidates"])
    assert str(caught.value).startswith("cannot describe an observation of type object as the observation space ")
    assert "Discrete(3) (TypeError: " in str(caught.value) and str(caught.value).endswith(
        "the env returned an observation its space does not hold; fix the env's observations or observation_space, "
        "or pass a describer (a callable observation -> str)"
    )
