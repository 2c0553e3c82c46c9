"""Candidate wrapper, perception, question text and the agents (fake scorer; no model)."""

from __future__ import annotations

import re

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("cv2")

from jetgym.agents import available_agents, make_agent  # noqa: E402
from jetgym.envs.vizdoom.perception import HORIZON, describe, find_blobs  # noqa: E402
from jetgym.agents.prompt import QUESTION, recent_text  # noqa: E402
from jetgym.envs.vizdoom.text import observation_text, status_text  # noqa: E402
from jetgym.envs.candidates import CandidateActions, CandidateSet  # noqa: E402
from jetgym.scorers import make_scorer  # noqa: E402


class Counter(gym.Env):
    """A tiny Discrete env: the observation counts the steps."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"hidden": "never shown"}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= 3, False, {"hidden": "never shown"}


def blank_screen() -> np.ndarray:
    """Rows of uniform colour: sky, wall, floor."""
    screen = np.zeros((100, 160, 3), np.uint8)
    screen[:30] = (20, 20, 60)
    screen[30:55] = (140, 100, 70)
    screen[55:] = (110, 110, 110)
    return screen


def with_sprite(x0: int, x1: int, y0: int = 38, y1: int = 54) -> np.ndarray:
    screen = blank_screen()
    screen[y0:y1, x0:x1] = (220, 30, 30)
    return screen


def doom_obs(screen=None, **status):
    status = status or {"health": 100, "ammo": 26, "kills": 0}
    return {
        "screen": blank_screen() if screen is None else screen,
        "status": {k: np.array(v, np.int32) for k, v in status.items()},
    }


CANDIDATES = CandidateSet(
    (
        "do nothing",
        "move forward",
        "move backward",
        "turn left",
        "turn right",
        "strafe left",
        "strafe right",
        "attack",
        "use",
    ),
    (
        "noop",
        "move_forward",
        "move_backward",
        "turn_left",
        "turn_right",
        "strafe_left",
        "strafe_right",
        "attack",
        "use",
    ),
    range(9),
)


# --- wrapper --------------------------------------------------------------------------------------------
def test_wrapper_adds_candidates_and_leaves_observations_alone():
    env = CandidateActions(Counter(), texts=["wait", "left", "right"])
    obs, info = env.reset(seed=0)
    assert info["candidates"] == CandidateSet(("wait", "left", "right"), ("0", "1", "2"), (0, 1, 2))
    assert info["hidden"] == "never shown" and np.array_equal(obs, np.zeros(1))
    obs, reward, terminated, truncated, info = env.step(1)
    assert info["candidates"].texts == ("wait", "left", "right") and obs[0] == 1 and reward == 1.0


def test_wrapper_errors():
    with pytest.raises(ValueError, match="2 candidate texts for 3 actions"):
        CandidateActions(Counter(), texts=["a", "b"])
    with pytest.warns(UserWarning, match="pass texts"):
        assert CandidateActions(Counter()).candidates.texts == ("action 0", "action 1", "action 2")
    with pytest.raises(ValueError, match="distinct"):
        CandidateActions(Counter(), texts=["a", "a", "b"])

    class Boxed(Counter):
        action_space = gym.spaces.Box(-1, 1, (2,))

    with pytest.raises(TypeError, match="Discrete action space.*DiscretizeAction"):
        CandidateActions(Boxed(), texts=["a", "b"])


# --- perception -----------------------------------------------------------------------------------------
def test_describe_reports_blobs_from_pixels():
    assert describe(blank_screen()) == "Seen on screen: nothing stands out."
    assert describe(with_sprite(78, 82, 44, 54)) == "Seen on screen: a small thing ahead, in the crosshair."
    assert describe(with_sprite(3, 7, 44, 54)) == "Seen on screen: a small thing on the far left."
    assert describe(with_sprite(68, 74, 44, 54)) == "Seen on screen: a small thing ahead, left of the crosshair."
    assert describe(with_sprite(86, 92, 44, 54)) == "Seen on screen: a small thing ahead, right of the crosshair."
    assert describe(with_sprite(120, 150, 20, 70)).startswith("Seen on screen: a large thing on the far right")
    weapon_only = blank_screen()
    weapon_only[70:100, 72:88] = (200, 160, 120)  # the player's own weapon box is ignored
    assert find_blobs(weapon_only) == []
    with pytest.raises(ValueError, match="RGB screen"):
        describe(np.zeros((100, 160), np.uint8))


def test_the_horizon_rule_drops_pale_patterns_above_it_and_keeps_coloured_things():
    ceiling = blank_screen()
    ceiling[10:16, 40:45] = (90, 90, 130)  # a brighter patch of the sky's own hue, wholly above the horizon
    red_above = with_sprite(40, 45, 10, 16)  # a red thing up there
    pale_below = blank_screen()
    pale_below[60:70, 40:45] = (200, 200, 200)  # a pale thing on the floor, below the horizon
    assert [b.x for b in find_blobs(ceiling)] == [0.2656]  # without a horizon every blob counts
    assert find_blobs(ceiling, horizon=HORIZON) == []
    assert [b.x for b in find_blobs(red_above, horizon=HORIZON)] == [0.2656]
    assert [b.x for b in find_blobs(pale_below, horizon=HORIZON)] == [0.2656]
    assert (
        observation_text(doom_obs(ceiling))
        == "Status: health 100, ammo 26, kills 0.\nSeen on screen: nothing stands out."
    )


# --- question text --------------------------------------------------------------------------------------
def test_status_and_recent_text():
    assert status_text(doom_obs()["status"]) == "Status: health 100, ammo 26, kills 0."
    assert status_text({}) == "Status: none shown."
    assert recent_text([]) == "Your last actions: none yet."
    assert recent_text(["turn left", "attack"]) == "Your last actions: turn left, attack."


def test_question_holds_only_what_screen_and_status_show(fake_scorer):
    agent = make_agent("scorer", scorer=make_scorer("fake"), task="TASK.", memory=2, perception="describe")
    agent.reset(0)
    obs = doom_obs(with_sprite(3, 7, 44, 54), health=87, ammo=13, kills=2)
    question = agent.question(obs, CANDIDATES)
    lines = question.context.split("\n")
    # every line is the fixed briefing, a rendering of the observation, the agent's own actions, or the controls
    assert lines == [
        "TASK.",
        "Status: health 87, ammo 13, kills 2.",
        describe(obs["screen"]),
        "Your last actions: none yet.",
        "Controls: " + ", ".join(CANDIDATES.texts) + ".",
        QUESTION,
    ]
    assert sorted(int(n) for n in re.findall(r"\d+", question.context)) == [2, 13, 87]
    assert question.candidates == CANDIDATES.texts and question.images == ()
    # the same observation gives the same question, whatever else the engine knows
    same = {"screen": obs["screen"].copy(), "status": dict(obs["status"])}
    assert agent.question(same, CANDIDATES) == question
    act = agent.act(obs, CANDIDATES)
    assert act.question == question.context and abs(sum(act.probs) - 1) < 1e-9
    assert "Your last actions: " + act.text + "." in agent.question(obs, CANDIDATES).context
    status_only = make_agent("scorer", scorer=make_scorer("fake"), task="TASK.", perception="none")
    assert "Seen on screen" not in status_only.question(obs, CANDIDATES).context
    assert "Your last actions" not in status_only.question(obs, CANDIDATES).context  # memory 0: not quoted
    with_image = make_agent("scorer", scorer=make_scorer("fake"), task="TASK.", screenshot=True)
    assert with_image.question(obs, CANDIDATES).images[0] is obs["screen"]


def test_worked_examples_become_chat_turns_before_the_observation(fake_scorer):
    examples = [
        ["Status: health 100, ammo 26, kills 0.\nSeen on screen: nothing stands out.", "turn left"],
        ["Status: health 90, ammo 20, kills 1.\nSeen on screen: a small thing ahead, in the crosshair.", "attack"],
    ]
    agent = make_agent("scorer", scorer=make_scorer("fake"), task="TASK.", memory=1, examples=examples)
    agent.reset(0)
    obs = doom_obs(health=87, ammo=13, kills=2)
    messages = agent.question(obs, CANDIDATES).context
    assert messages[0] == {
        "role": "system",
        "content": "TASK.\nControls: " + ", ".join(CANDIDATES.texts) + ".\n" + QUESTION,
    }
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert [(m["content"]) for m in messages[1:5]] == [examples[0][0], "turn left", examples[1][0], "attack"]
    assert messages[-1]["content"] == (
        "Status: health 87, ammo 13, kills 2.\n" + describe(obs["screen"]) + "\nYour last actions: none yet."
    )
    act = agent.act(obs, CANDIDATES)
    assert act.question == messages  # steps.jsonl records the whole chat the scorer saw
    assert agent.question(obs, CANDIDATES).context[-1]["content"].endswith(f"Your last actions: {act.text}.")
    no_memory = make_agent("scorer", scorer=make_scorer("fake"), task="TASK.", memory=0, examples=examples)
    assert "Your last actions" not in no_memory.question(obs, CANDIDATES).context[-1]["content"]


@pytest.mark.parametrize(
    "examples,message",
    [
        ([["seen"]], r"examples\[0\] must be an \[observation text, control text\] pair"),
        (["seen, attack"], r"examples\[0\] must be an \[observation text, control text\] pair"),
        ([["seen", " "]], r"examples\[0\] must be an \[observation text, control text\] pair"),
    ],
)
def test_bad_examples_are_refused(fake_scorer, examples, message):
    with pytest.raises(ValueError, match=message):
        make_agent("scorer", scorer=make_scorer("fake"), examples=examples)


def test_an_example_control_must_be_one_of_the_envs_controls():
    from jetgym.agents.prompt import check_example_controls

    with pytest.raises(
        ValueError,
        match=r"env.examples\[0\]: the control 'jump' \(for 'seen'\) is not one of "
        r"jetgym/Doom-v0's controls \(do nothing, attack\); write one of them",
    ):
        check_example_controls([("seen", "jump")], ["do nothing", "attack"], "jetgym/Doom-v0")


def test_question_from_a_live_env_matches_its_observation():
    pytest.importorskip("vizdoom")
    from jetgym.envs.vizdoom.env import DoomEnv

    env = CandidateActions(DoomEnv("defend_the_center", episode_timeout=40))
    try:
        obs, info = env.reset(seed=4)
        agent = make_agent("scorer", scorer=make_scorer("fake"), env=env)  # task and describer from the env
        agent.reset(4)
        assert agent.task == env.unwrapped.task and agent.describer.__qualname__.startswith("doom")
        text = agent.question(obs, info["candidates"]).context
        assert text.split("\n")[1] == status_text(obs["status"]) and text.split("\n")[2] == describe(obs["screen"])
        assert "candidates" not in text and "engine" not in text
    finally:
        env.close()


# --- agents ---------------------------------------------------------------------------------------------
def test_registry_and_did_you_mean():
    assert available_agents() == ["fixed", "random", "scorer", "scripted"]
    with pytest.raises(LookupError, match="Did you mean 'scripted'"):
        make_agent("scriptd")


def test_sampling_is_seeded(fake_scorer):
    agent = make_agent("scorer", scorer=make_scorer("fake"), task="T", policy="sample", temperature=2.0, memory=0)

    def run(seed):
        agent.reset(seed)
        return [agent.act(doom_obs(health=h), CANDIDATES).index for h in range(40, 100, 3)]

    assert run(1) == run(1) and run(1) != run(2)
    argmax = make_agent("scorer", scorer=make_scorer("fake"), task="T")
    argmax.reset(0)
    act = argmax.act(doom_obs(), CANDIDATES)
    assert act.index == int(np.argmax(act.probs)) and act.action == act.index


class PreferenceScorer:
    """Scores the candidates by a fixed preference per question: the first of `order` the most."""

    def __init__(self, order):
        self.order = order

    def decide_many(self, questions):
        from jetgym.scorers.decision import make_decision
        from jetgym.scorers.types import Usage

        return [
            make_decision(q, q.candidates, [-float(self.order.index(c)) for c in q.candidates], Usage())
            for q in questions
        ]


def test_untried_takes_the_best_candidate_not_yet_taken_at_a_repeated_question():
    controls = CandidateSet(("turn left", "turn right", "go forward"), ("a", "b", "c"), (0, 1, 2))
    scorer = PreferenceScorer(["turn right", "turn left", "go forward"])

    def play(**options):
        agent = make_agent("scorer", scorer=scorer, task="T", describer=lambda o: f"view {o}", **options)
        agent.reset(0)
        return [agent.act(view, controls).text for view in ("A", "B", "A", "A", "A", "A", "B")]

    assert play() == ["turn right"] * 7
    # A: right, then left, then forward, then all taken: right again; B's second visit: its second best.
    assert play(policy="untried") == [
        "turn right",
        "turn right",
        "turn left",
        "go forward",
        "turn right",
        "turn left",
        "turn left",
    ]
    agent = make_agent("scorer", scorer=scorer, task="T", describer=lambda o: "same", policy="untried")
    agent.reset(0)
    agent.act("x", controls)
    agent.reset(1)  # a new episode forgets what was taken
    assert agent.act("x", controls).text == "turn right"


def test_a_question_with_many_candidates_warns_once(fake_scorer):
    import warnings

    def commands(texts):
        return CandidateSet(texts, texts, texts)

    agent = make_agent("scorer", scorer=make_scorer("fake"), task="T", describer=lambda o: f"room {o}")
    agent.reset(0)
    many = commands(tuple(f"take coin {k}" for k in range(300)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.act(0, commands(tuple(f"go {k}" for k in range(64))))  # at the bound: no warning
        agent.act(1, many)
        agent.act_many([2, 3], [many, many])
    assert [str(w.message) for w in caught if "candidates" in str(w.message)] == [
        "a question with 300 candidates (more than 64): every decision scores all of them (with hundreds, tens of "
        "seconds a decision on a CPU); to go faster, play an env that admits fewer actions (a text game with fewer "
        "rooms and objects), place the model on a GPU (placement.device=cuda) or use a smaller model (model.spec)"
    ]


@pytest.mark.parametrize(
    "options,message",
    [
        ({"perception": "vision"}, "unknown perception 'vision'"),
        ({"policy": "greedy"}, "unknown policy 'greedy'"),
        ({"temperature": 0}, "temperature must be > 0"),
        ({"memory": -1}, "memory must be >= 0"),
    ],
)
def test_scorer_agent_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        make_agent("scorer", scorer=None, **options)


def test_random_agent_is_seeded():
    agent = make_agent("random")
    agent.reset(3)
    first = [agent.act(doom_obs(), CANDIDATES).label for _ in range(20)]
    agent.reset(3)
    assert [agent.act(doom_obs(), CANDIDATES).label for _ in range(20)] == first and len(set(first)) > 3


def test_scripted_agent_policy():
    agent = make_agent("scripted")
    agent.reset(0)
    assert agent.act(doom_obs(with_sprite(78, 82, 44, 54)), CANDIDATES).label == "attack"
    assert agent.act(doom_obs(with_sprite(78, 82, 44, 54), ammo=0), CANDIDATES).label == "move_forward"
    assert agent.act(doom_obs(with_sprite(130, 140)), CANDIDATES).label == "turn_right"
    assert agent.act(doom_obs(), CANDIDATES).label == "turn_right"  # keeps turning the last way
    assert agent.act(doom_obs(with_sprite(5, 15)), CANDIDATES).label == "turn_left"
    assert agent.act(doom_obs(blank_screen(), health=50, ammo=3), CANDIDATES).label == "turn_left"
    no_weapon = {"screen": blank_screen(), "status": {"health": np.array(50, np.int32)}}
    assert agent.act(no_weapon, CANDIDATES).label == "move_forward"  # health gathering: walk
    strafer = make_agent("scripted", aim="strafe")
    strafer.reset(0)
    assert strafer.act(doom_obs(with_sprite(130, 140)), CANDIDATES).label == "strafe_right"
    assert strafer.act(doom_obs(with_sprite(68, 74)), CANDIDATES).label == "strafe_left"
    assert strafer.act(doom_obs(with_sprite(78, 82, 44, 54)), CANDIDATES).label == "attack"
    with pytest.raises(ValueError, match="scripted agent's aim must be 'turn' or 'strafe', got 'jump'"):
        make_agent("scripted", aim="jump")


def test_fixed_agent_plays_one_control_by_label_or_text():
    for control in ("attack", "turn left"):
        agent = make_agent("fixed", control=control)
        agent.reset(0)
        labels = {agent.act(doom_obs(with_sprite(5 + 10 * i, 15 + 10 * i)), CANDIDATES).label for i in range(5)}
        assert labels == {control.replace(" ", "_")}


def test_fixed_agent_errors_name_the_admissible_controls():
    with pytest.raises(ValueError, match="needs control="):
        make_agent("fixed", control=" ")
    masked = CandidateSet(("turn left", "attack"), ("turn_left", "attack"), (3, 7))
    with pytest.raises(
        ValueError,
        match=r"control 'use' is not an admissible candidate here; admissible: turn_left \('turn left'\), attack",
    ):
        make_agent("fixed", control="use").act(doom_obs(), masked)
