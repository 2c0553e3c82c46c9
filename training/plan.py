"""Planning on what was played (`train.advantage=plan`): every transition of every round so far, keyed by its
question, is an empirical MDP; value iteration on it gives each question's actions a value, and a question
played with more than one action is labelled with its best one.

A state's value is the best of its played actions; an action's value is its mean reward plus the discounted
value of the states it led to, weighted by how often it led to each (a deterministic env has one). An episode's
last step is added only when it terminated (value 0 after it); a step cut by a time limit or the budget has no
known next state and is left out. Unlike returns to go, these values do not depend on what the exploring
episodes did after a state: a delivery found once lifts every state from which it was reached, by the shortest
route played. Questions that never recur (continuous observations) get no label here: there, only the kept
episodes teach.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from jetgym.scorers import Question
from jetgym.scorers.memo import question_key

TERMINAL = b""  # the key of the state after a terminating step (value 0)


def state_key(decision: Question) -> bytes:
    """The key of a decision's question, whatever action was taken."""
    return question_key(replace(decision, gold=None))


@dataclass
class Edge:
    """One (state, action) pair: how often it was played, its summed reward, how often it led to each state."""

    visits: int = 0
    reward: float = 0.0
    next: dict[bytes, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Label:
    """A question (gold: its best action), that action's value, its lead over the mean of the played ones, and
    the other played actions of the same value (`ties`: equally short routes)."""

    decision: Question
    value: float
    advantage: float
    ties: tuple[int, ...] = ()


class Transitions:
    """The empirical MDP of every step played so far (states are question keys)."""

    def __init__(self, rows: Iterable[dict] = ()):
        self.edges: dict[bytes, dict[int, Edge]] = {}
        self.width: dict[bytes, int] = {}  # each state's number of candidates
        self.questions: dict[bytes, Question] = {}  # kept once a state has been played with two actions
        self._planned: tuple[float, dict[bytes, dict[int, float]]] | None = None  # (gamma, values) since the last add
        for row in rows:
            key = bytes.fromhex(row["state"])
            self.width[key] = row["width"]
            self.edges[key] = {
                int(a): Edge(v, r, {bytes.fromhex(n): c for n, c in nxt.items()})
                for a, (v, r, nxt) in row["actions"].items()
            }
            if row.get("question"):
                q = row["question"]
                self.questions[key] = Question(
                    context=q["context"], candidates=q["candidates"], labels=q["labels"] or None
                )

    def add(self, decisions: Sequence[Question], rewards: Sequence[float], terminated: bool) -> None:
        """One episode's steps (gold: the action taken)."""
        self._planned = None
        keys = [state_key(d) for d in decisions] + [TERMINAL]
        for t in range(len(decisions) if terminated else len(decisions) - 1):
            self.width[keys[t]] = len(decisions[t].candidates or ())
            actions = self.edges.setdefault(keys[t], {})
            edge = actions.setdefault(int(decisions[t].gold), Edge())
            edge.visits += 1
            edge.reward += float(rewards[t])
            edge.next[keys[t + 1]] = edge.next.get(keys[t + 1], 0) + 1
            if len(actions) > 1 and keys[t] not in self.questions:
                self.questions[keys[t]] = replace(decisions[t], gold=None)

    def values(
        self, gamma: float, untried: float | None = None, tolerance: float = 1e-6, max_sweeps: int = 10_000
    ) -> dict[bytes, dict[int, float]]:
        """Each played (state, action)'s value under value iteration (until no value moves by `tolerance`).
        `untried`: the value of an action never played, so that a state with one, or never left, is worth at
        least that (optimism, for exploring); None: a state is worth its best played action, one never left 0."""
        keys = list(self.edges)
        states = {key: i + 1 for i, key in enumerate(keys)}  # 0: terminal, and with untried=None never left
        pairs = [(key, action, edge) for key, actions in self.edges.items() for action, edge in actions.items()]
        owner = np.array([states[key] for key, _, _ in pairs], dtype=np.int64)
        reward = np.array([e.reward / e.visits for _, _, e in pairs])
        source, target, weight = [], [], []
        for i, (_, _, edge) in enumerate(pairs):
            for key, count in edge.next.items():
                source.append(i)
                target.append(states.get(key, 0 if key == TERMINAL or untried is None else len(states) + 1))
                weight.append(count / edge.visits)
        source_, target_, weight_ = np.array(source, dtype=np.int64), np.array(target, dtype=np.int64), np.array(weight)
        floor = np.full(len(states) + 2, -np.inf)  # what a state is worth whatever was played there
        floor[0] = 0.0
        if untried is not None:
            floor[-1] = untried
            floor[1:-1][[len(self.edges[key]) < self.width[key] for key in keys]] = untried
        value = np.where(np.isfinite(floor), floor, 0.0)
        q = reward
        for _ in range(max_sweeps):
            q = reward + gamma * np.bincount(source_, weights=weight_ * value[target_], minlength=len(pairs))
            best = floor.copy()
            np.maximum.at(best, owner, q)
            best[np.isinf(best)] = 0.0
            moved = float(np.max(np.abs(best - value)))
            value = best
            if moved < tolerance:
                break
        out: dict[bytes, dict[int, float]] = {}
        for (key, action, _), v in zip(pairs, q):
            out.setdefault(key, {})[action] = float(v)
        return out

    def planned(self, gamma: float) -> dict[bytes, dict[int, float]]:
        """`values(gamma)`, computed once between two `add`s (a round's labels and the next round's explorer)."""
        if self._planned is None or self._planned[0] != gamma:
            self._planned = (gamma, self.values(gamma))
        return self._planned[1]

    def explorer(self, gamma: float) -> dict[bytes, list[int]]:
        """At each state played so far, the actions an optimistic explorer takes: those of best value when every
        action never played is worth one more than the best value of any played one (so the explorer heads for
        the nearest state with an untried action, and tries it). A state not listed is new: any action will do."""
        known = self.planned(gamma)
        if not known:
            return {}
        untried = max(v for actions in known.values() for v in actions.values()) + 1
        optimistic = self.values(gamma, untried)
        out = {}
        for key, width in self.width.items():
            values = [optimistic[key].get(a, untried) for a in range(width)]
            top = max(values)
            out[key] = [a for a, v in enumerate(values) if v >= top - 1e-9]
        return out

    def tried_all(self, key: bytes) -> bool:
        """Whether every candidate of the state has been played there (its best played action is its best one)."""
        return len(self.edges.get(key, ())) >= self.width.get(key, 1)

    def labels(self, gamma: float, tolerance: float = 1e-6) -> list[Label]:
        """At every state played with more than one action whose values differ, the best action (gold: the lowest
        index of those within `tolerance` of the best value, the others its `ties`)."""
        values = self.planned(gamma)
        out = []
        for key, question in self.questions.items():
            actions = values[key]
            top = max(actions.values())
            best, *ties = sorted(a for a, v in actions.items() if v >= top - tolerance)
            advantage = top - sum(actions.values()) / len(actions)
            if advantage > 1e-9:
                out.append(Label(replace(question, gold=best), top, advantage, tuple(ties)))
        return out

    def rows(self) -> list[dict]:
        """The transitions as JSON rows (checkpoints)."""
        rows = []
        for key, actions in self.edges.items():
            row: dict = {
                "state": key.hex(),
                "width": self.width[key],
                "actions": {
                    str(a): [e.visits, e.reward, {n.hex(): c for n, c in e.next.items()}] for a, e in actions.items()
                },
            }
            question = self.questions.get(key)
            if question is not None:
                row["question"] = {
                    "context": question.context,
                    "candidates": list(question.candidates),
                    "labels": list(question.labels or ()),
                }
            rows.append(row)
        return rows
