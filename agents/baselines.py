"""Baselines for the same runner: `random`, `fixed` and `scripted`."""

from __future__ import annotations

import numpy as np

from jetgym.envs.minigrid import BabyAIExpert
from jetgym.envs.vizdoom.expert import DoomExpert

from .base import AGENTS, Act, AgentBase
from .describers import env_family, representative

EXPERT_ENVS = "ViZDoom, Taxi, FrozenLake and BabyAI"  # the envs the scripted agent plays


def _act(candidates, index: int) -> Act:
    return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index])


@AGENTS.register("random")
class RandomAgent(AgentBase):
    """Uniform over the (admissible) candidates, seeded per episode and slot."""

    def __init__(self):
        self.rngs: dict[int, np.random.Generator] = {}

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        self.rngs[slot] = np.random.default_rng(seed)

    def act_one(self, observation, candidates, slot: int) -> Act:
        rng = self.rngs.setdefault(slot, np.random.default_rng())
        return _act(candidates, int(rng.integers(len(candidates.texts))))


@AGENTS.register("fixed")
class FixedAgent(AgentBase):
    """Plays one control at every step: `control` is a candidate label or text (e.g. `attack`, `turn left`).

    A control that is not among a step's admissible candidates (masked, or not an action of this env) is an
    error naming the ones that are."""

    def __init__(self, control: str):
        if not isinstance(control, str) or not control.strip():
            raise ValueError(f"the fixed agent needs control=<a candidate label or text>, got {control!r}")
        self.control = control

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        pass

    def act_one(self, observation, candidates, slot: int) -> Act:
        for names in (candidates.labels, candidates.texts):
            if self.control in names:
                return _act(candidates, list(names).index(self.control))
        raise ValueError(
            f"control {self.control!r} is not an admissible candidate here; admissible: "
            + ", ".join(f"{label} ({text!r})" for label, text in zip(candidates.labels, candidates.texts))
        )


@AGENTS.register("scripted")
class ScriptedAgent(AgentBase):
    """Hand-written experts, for baselines and demonstrations (`jetgym-train algorithm=bc`).

    ViZDoom: `jetgym.envs.vizdoom.expert.DoomExpert` (`aim`: turn or strafe toward what it sees), one per slot.
    Taxi (`env` given): a shortest route on the env's map to the passenger, `pick up`, a shortest route to the
    destination, `drop off`; ties go to the earliest of south, north, east, west. FrozenLake (`env` given): the
    move that maximizes the chance of reaching the goal (`FrozenLakePlan`). BabyAI (`env` given; a vector env
    must be `sync`): MiniGrid's BabyAI bot on each slot's sub-env (`jetgym.envs.minigrid.BabyAIExpert`).
    Deterministic. `ScriptedAgent.plays(env)`: whether it has an expert for `env`."""

    def __init__(self, env=None, aim: str = "turn"):
        self.aim = aim
        self.doom = {0: DoomExpert(aim)}  # one per slot; made here first, so a bad aim fails at once
        plans = {"Taxi": TaxiRoutes, "FrozenLake": FrozenLakePlan}
        family = env_family(env)
        self.plan = plans[family](env) if family in plans else None
        self.minigrid = sub_envs(env) if family.startswith("BabyAI") else None  # the bot reads BabyAI missions
        self.bots: dict[int, BabyAIExpert] = {}

    @staticmethod
    def plays(env) -> bool:
        """Whether there is an expert for `env`: ViZDoom (observations with `screen` and `status`), Taxi,
        FrozenLake or BabyAI (a single or vector env)."""
        from gymnasium import spaces

        family = env_family(env)
        if family in ("Taxi", "FrozenLake") or family.startswith("BabyAI"):
            return True
        space = getattr(env, "single_observation_space", None) or getattr(env, "observation_space", None)
        return isinstance(space, spaces.Dict) and {"screen", "status"} <= set(space.spaces)

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        self.doom[slot] = DoomExpert(self.aim)
        self.bots.pop(slot, None)

    def act_one(self, observation, candidates, slot: int) -> Act:
        if self.plan is not None:
            action = self.plan.action(int(observation))
            return _act(candidates, list(candidates.actions).index(action))
        if self.minigrid is not None:
            if slot not in self.bots:
                self.bots[slot] = BabyAIExpert(self.minigrid[slot])
            return _act(candidates, list(candidates.actions).index(self.bots[slot].action()))
        if not (isinstance(observation, dict) and {"screen", "status"} <= set(observation)):
            raise ValueError(
                f"the scripted agent plays {EXPERT_ENVS} only (observation['screen'] and ['status'], "
                f"or a Taxi, FrozenLake or BabyAI env); use agent=scorer or agent=random on other envs"
            )
        if slot not in self.doom:
            self.doom[slot] = DoomExpert(self.aim)
        label = self.doom[slot].label(observation)
        return _act(candidates, list(candidates.labels).index(label))


def sub_envs(env) -> list:
    """The single envs of `env` by slot: itself, or a SyncVectorEnv's sub-envs (an async one's live elsewhere)."""
    if not hasattr(env, "num_envs"):
        return [env]
    if getattr(env, "envs", None):
        return list(env.envs)
    raise ValueError("the scripted agent plays each sub-env's own state: use env.vectorization=sync")


class TaxiRoutes:
    """Shortest routes on a Gymnasium Taxi map (`desc`: a wall `|` or an opening `:` between neighbouring
    cells; `locs`: the four stops). Actions: 0 south, 1 north, 2 east, 3 west, 4 pick up, 5 drop off."""

    MOVES = ((1, 0), (-1, 0), (0, 1), (0, -1))

    def __init__(self, env):
        taxi = representative(env).unwrapped
        self.desc, self.locs, self.decode = taxi.desc, list(taxi.locs), taxi.decode
        self.rows, self.cols = len(self.desc) - 2, (len(self.desc[0]) - 1) // 2
        self.distances: dict[tuple[int, int], dict[tuple[int, int], int]] = {}

    def action(self, state: int) -> int:
        row, col, passenger, destination = self.decode(state)
        target = self.locs[passenger] if passenger < 4 else self.locs[destination]
        if (row, col) == tuple(target):
            return 4 if passenger < 4 else 5
        distance = self._distances(tuple(target))
        here = distance[(row, col)]
        for action, cell in self._neighbours(row, col):
            if distance.get(cell, here) < here:
                return action
        raise ValueError(f"the Taxi map has no route from {(row, col)} to {tuple(target)}")

    def _neighbours(self, row: int, col: int):
        for action, (dr, dc) in enumerate(self.MOVES):
            r, c = row + dr, col + dc
            if not (0 <= r < self.rows and 0 <= c < self.cols):
                continue
            if dc and self.desc[1 + row][2 * min(col, c) + 2] != b":":  # the wall between the two columns
                continue
            yield action, (r, c)

    def _distances(self, target: tuple[int, int]) -> dict[tuple[int, int], int]:
        """Steps from every cell to `target` (breadth-first; moves are symmetric)."""
        if target not in self.distances:
            distance, frontier = {target: 0}, [target]
            while frontier:
                reached = []
                for here in frontier:
                    for _, cell in self._neighbours(*here):
                        if cell not in distance:
                            distance[cell] = distance[here] + 1
                            reached.append(cell)
                frontier = reached
            self.distances[target] = distance
        return self.distances[target]


class FrozenLakePlan:
    """The best move on a Gymnasium FrozenLake map from its own transition table (`P`: per state and action, the
    outcomes' probabilities): value iteration on the chance of reaching the goal, discounted by `gamma` per step so
    that, of two equally safe ways, the shorter wins. Ties go to the earliest of left, down, right, up."""

    def __init__(self, env, gamma: float = 0.99, tolerance: float = 1e-10):
        transitions = representative(env).unwrapped.P
        states, actions = len(transitions), len(transitions[0])
        value = np.zeros(states)
        while True:
            worth = np.array(
                [
                    [
                        sum(
                            p * (reward + (0.0 if done else gamma * value[after]))
                            for p, after, reward, done in transitions[s][a]
                        )
                        for a in range(actions)
                    ]
                    for s in range(states)
                ]
            )
            best = worth.max(axis=1)
            if np.max(np.abs(best - value)) < tolerance:
                break
            value = best
        self.moves, self.values = worth.argmax(axis=1), best

    def action(self, state: int) -> int:
        return int(self.moves[state])
