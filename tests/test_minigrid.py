"""MiniGrid / BabyAI: the `minigrid` describer on hand-built views, its tables against minigrid's, the action
texts, and the ready configs on the real envs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jetgym.agents.describers_minigrid import COLOURS, DOOR_STATES, OBJECTS, cell_place, describe_view

EMPTY, WALL, DOOR, KEY, BALL, BOX, GOAL, LAVA = (
    OBJECTS.index(n) for n in ("empty", "wall", "door", "key", "ball", "box", "goal", "lava")
)
RED, GREEN, BLUE, YELLOW = (COLOURS.index(n) for n in ("red", "green", "blue", "yellow"))
OPEN, CLOSED, LOCKED = range(3)


def view(
    cells: dict[tuple[int, int], tuple[int, int, int]],
    size: int = 7,
    direction: int = 0,
    mission: str = "go to the red ball",
    carrying=None,
) -> dict:
    """An observation whose cell `ahead, across` (from the agent; across > 0 is right) holds `cells[...]`."""
    image = np.zeros((size, size, 3), np.uint8)
    image[:, :, 0] = EMPTY
    me_x, me_y = size // 2, size - 1
    for (ahead, across), cell in cells.items():
        image[me_x + across, me_y - ahead] = cell
    if carrying is not None:
        image[me_x, me_y] = carrying
    return {"image": image, "direction": direction, "mission": mission}


def seen(text: str) -> str:
    return text.splitlines()[-1]


def test_places_relative_to_the_agent():
    assert cell_place(1, 0) == "right in front"
    assert cell_place(3, 0) == "3 steps ahead"
    assert cell_place(0, 1) == "on the right" and cell_place(0, -1) == "on the left"
    assert cell_place(0, -2) == "2 steps to the left"
    assert cell_place(2, -1) == "2 steps ahead and 1 to the left"
    assert cell_place(1, 3) == "1 step ahead and 3 to the right"


def test_left_right_and_distance_come_from_the_cell_position():
    ball_left = view({(2, -1): (BALL, RED, 0)})
    ball_right = view({(2, 1): (BALL, RED, 0)})
    ball_far = view({(4, -1): (BALL, RED, 0)})
    assert seen(describe_view(ball_left)) == "You see: a red ball 2 steps ahead and 1 to the left."
    assert seen(describe_view(ball_right)) == "You see: a red ball 2 steps ahead and 1 to the right."
    assert seen(describe_view(ball_far)) == "You see: a red ball 4 steps ahead and 1 to the left."


def test_walls_doors_and_the_cell_in_front():
    obs = view(
        {
            (1, 0): (WALL, 5, 0),
            (0, 1): (DOOR, YELLOW, CLOSED),
            (0, -3): (WALL, 5, 0),
            (0, -2): (DOOR, BLUE, LOCKED),
            (3, 2): (DOOR, GREEN, OPEN),
            (5, 0): (WALL, 5, 0),
        }
    )
    assert seen(describe_view(obs)) == (
        "You see: a wall right in front; a closed yellow door on the right; a locked blue "
        "door 2 steps to the left; a wall 3 steps to the left; an open green door 3 steps "
        "ahead and 2 to the right."
    )  # only the nearest wall ahead is said


def test_only_the_nearest_wall_on_each_line_and_none_off_the_lines():
    obs = view(
        {(2, 0): (WALL, 5, 0), (4, 0): (WALL, 5, 0), (0, 2): (WALL, 5, 0), (0, 3): (WALL, 5, 0), (3, 3): (WALL, 5, 0)}
    )
    assert seen(describe_view(obs)) == "You see: a wall 2 steps ahead; a wall 2 steps to the right."


def test_mission_heading_carried_object_and_empty_view():
    obs = view({}, direction=3, mission="pick up the blue key", carrying=(KEY, BLUE, 0))
    assert describe_view(obs) == (
        "Mission: pick up the blue key.\nYou face north. You carry a blue key.\n"
        "Named in the mission: the blue key, carried.\nYou see nothing but empty floor."
    )
    assert "You carry nothing." in describe_view(view({}))


def test_goal_lava_and_nearest_first_with_a_cap():
    obs = view({(2, 2): (GOAL, GREEN, 0), (1, -1): (LAVA, RED, 0), (4, 3): (BOX, BLUE, 0)})
    assert seen(describe_view(obs)) == (
        "You see: lava 1 step ahead and 1 to the left; the green goal square 2 steps "
        "ahead and 2 to the right; a blue box 4 steps ahead and 3 to the right."
    )
    assert seen(describe_view(obs, max_items=1)) == "You see: lava 1 step ahead and 1 to the left."


def test_unseen_cells_say_nothing():
    obs = view({(2, 0): (BALL, RED, 0)})
    obs["image"][:, :2, :] = 0  # the far rows unseen
    obs["image"][3, 4] = (0, 0, 0)
    assert seen(describe_view(obs)) == "You see nothing but empty floor."


def test_bad_view_shape_is_refused():
    with pytest.raises(
        ValueError,
        match=re.escape("describer 'minigrid' needs observation['image'] of shape (k, k, 3) with k odd, got (6, 6, 3)"),
    ):
        describe_view({"image": np.zeros((6, 6, 3), np.uint8), "direction": 0, "mission": "x"})


# --- against the real package ------------------------------------------------------------------------------------
def test_tables_are_minigrids():
    constants = pytest.importorskip("minigrid.core.constants")
    assert {name: i for i, name in enumerate(OBJECTS)} == constants.OBJECT_TO_IDX
    assert {name: i for i, name in enumerate(COLOURS)} == constants.COLOR_TO_IDX
    assert {name: i for i, name in enumerate(DOOR_STATES)} == constants.STATE_TO_IDX


def test_real_view_places_an_object_where_the_agent_sees_it():
    pytest.importorskip("minigrid")
    import gymnasium as gym
    from minigrid.core.constants import DIR_TO_VEC
    from minigrid.core.world_object import Ball

    env = gym.make("MiniGrid-Empty-8x8-v0")
    env.reset(seed=0)
    base = env.unwrapped
    base.agent_pos, base.agent_dir = (3, 4), 3  # facing north (up): its left is west
    forward = np.array(DIR_TO_VEC[base.agent_dir])
    right = np.array([-forward[1], forward[0]])
    base.grid.set(*(np.array(base.agent_pos) + 2 * forward - right), Ball("red"))
    text = describe_view(base.gen_obs())
    assert "You face north." in text and "a red ball 2 steps ahead and 1 to the left" in text


def test_auto_describer_and_texts_for_real_envs(fake_scorer):
    pytest.importorskip("minigrid")
    import gymnasium as gym

    from jetgym.agents import make_agent
    from jetgym.envs.candidates import CandidateActions
    from jetgym.envs.minigrid import ACTION_LABELS, ACTION_TEXTS
    from jetgym.scorers import make_scorer

    env = CandidateActions(gym.make("minigrid:BabyAI-GoToRedBallGrey-v0"))
    obs, info = env.reset(seed=3)
    assert info["candidates"].texts == ACTION_TEXTS and info["candidates"].labels == ACTION_LABELS
    agent = make_agent("scorer", scorer=make_scorer("fake"), env=env, task="Complete the mission.")
    question = agent.question(obs, info["candidates"])
    assert "Mission: go to the red ball." in question.context and "You see:" in question.context
    explicit = CandidateActions(gym.make("BabyAI-GoToRedBallGrey-v0"), texts=list("abcdefg"))
    assert explicit.reset(seed=0)[1]["candidates"].texts == tuple("abcdefg")


@pytest.mark.parametrize(
    "name",
    ["babyai_goto_red_ball_grey", "babyai_goto_obj", "babyai_pickup_loc", "minigrid_empty_5x5", "minigrid_doorkey_5x5"],
)
def test_ready_configs_play(tmp_path, name):
    pytest.importorskip("minigrid")
    import json

    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    out = tmp_path / name
    episode_job(
        compose(
            "episode",
            [f"env={name}", "agent=random", "video=false", "episodes=2", "env.num_envs=2", f"output_dir={out}"],
        ),
        quiet=True,
    )
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert rows and {r["text"] for r in rows} <= {
        "turn left",
        "turn right",
        "move forward",
        "pick up",
        "drop",
        "open",
        "done",
    }


def test_scripted_agent_plays_the_babyai_bot_in_every_sub_env():
    """The `scripted` agent on BabyAI is MiniGrid's bot: it completes every mission, the same episodes one env at
    a time and on four sync sub-envs; async sub-envs (their state lives in other processes) are refused."""
    pytest.importorskip("minigrid")
    from types import SimpleNamespace

    from jetgym.agents import make_agent, rollout
    from jetgym.agents.baselines import sub_envs
    from jetgym.scripts.build import make_env
    from jetgym.scripts.config import compose, to_config

    def played(*overrides):
        env = make_env(to_config(compose("episode", ["env=babyai_goto_obj", *overrides])))
        try:
            return [(e["seed"], e["length"], e["return"]) for e in rollout(env, make_agent("scripted", env=env), 6, 20)]
        finally:
            env.close()

    alone = played()
    assert all(reward > 0 for _, _, reward in alone) and alone == played("env.num_envs=4")
    with pytest.raises(
        ValueError, match="the scripted agent plays each sub-env's own state: use env.vectorization=sync"
    ):
        sub_envs(SimpleNamespace(num_envs=2))  # an async vector env: no sub-envs in this process


def test_goto_local_split_keeps_the_held_out_objects_for_the_test_side():
    """Train missions never name a held-out object, test missions always do; a seed gives one layout; the rest is
    GoToLocal (one room, eight objects, 64 steps, described like any MiniGrid view)."""
    pytest.importorskip("minigrid")
    import gymnasium as gym

    from jetgym.envs.babyai_splits import HELD_OUT, names_held_out

    missions = {}
    for side in ("Train", "Test"):
        env = gym.make(f"jetgym/BabyAI-GoToLocal{side}-v0")
        missions[side] = [env.reset(seed=seed)[0]["mission"] for seed in range(60)]
        again = env.reset(seed=7)[0]
        assert again["mission"] == missions[side][7] and env.unwrapped.max_steps == 64
        assert (again["image"] == env.reset(seed=7)[0]["image"]).all()
        assert len([o for o in env.unwrapped.grid.grid if o is not None and o.type != "wall"]) == 8
        assert describe_view(again).startswith(f"Mission: {again['mission']}.")
    assert not any(map(names_held_out, missions["Train"])) and all(map(names_held_out, missions["Test"]))
    assert len(set(missions["Train"])) > 10  # every other colour and kind still comes up
    assert {name for name in HELD_OUT if any(name in m for m in missions["Test"])} == set(HELD_OUT)


def test_the_mission_s_objects_are_found_in_the_view():
    obs = view({(2, -1): (BALL, RED, 0), (1, 1): (BALL, RED, 0), (3, 0): (BOX, BLUE, 0)}, mission="go to the red ball")
    assert describe_view(obs).splitlines()[2] == "Named in the mission: the red ball 1 step ahead and 1 to the right."
    pair = view({(3, 0): (BOX, BLUE, 0)}, mission="put the red ball next to a box")
    assert "Named in the mission: the red ball, not in view; the box 3 steps ahead." in describe_view(pair)
    held = view({}, mission="pick up the blue key then go to a box", carrying=(KEY, BLUE, 0))
    assert "Named in the mission: the blue key, carried; the box, not in view." in describe_view(held)
    assert "Named in the mission" not in describe_view(view({}, mission="get to the green goal square"))


def test_auto_policy_plays_untried_on_deterministic_envs(fake_scorer):
    pytest.importorskip("minigrid")
    import gymnasium as gym

    from jetgym.agents import make_agent
    from jetgym.envs.candidates import CandidateActions
    from jetgym.scorers import make_scorer

    def policy(env, chosen="auto"):
        return make_agent("scorer", scorer=make_scorer("fake"), env=env, policy=chosen).policy

    def lake(slippery):
        return CandidateActions(gym.make("FrozenLake-v1", is_slippery=slippery), texts=["left", "down", "right", "up"])

    babyai = CandidateActions(gym.make("minigrid:BabyAI-GoToRedBallGrey-v0"))
    vector = gym.vector.SyncVectorEnv([lambda: CandidateActions(gym.make("BabyAI-GoToRedBallGrey-v0"))] * 2)
    assert policy(babyai) == "untried" and policy(vector) == "untried"
    assert policy(lake(False)) == "untried"  # its table has one outcome per action
    cart = CandidateActions(gym.make("CartPole-v1"), texts=["left", "right"])
    assert policy(lake(True)) == "argmax" and policy(cart) == "argmax" and policy(None) == "argmax"
    cart.unwrapped.deterministic = True  # an env that says so
    assert policy(cart) == "untried"
    assert policy(babyai, "argmax") == "argmax" and policy(babyai, "sample") == "sample"
