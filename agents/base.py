"""The agent interface, the record of one decision, and the agent registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from jetgym.scorers.registry import Registry


@dataclass(frozen=True)
class Act:
    """One decision: candidate `index` (env action `action`), and, for scoring agents, the distribution."""

    index: int
    action: int | str  # the env action: an index, or the command string of a text-command env
    label: str
    text: str
    probs: tuple[float, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    question: str | None = None
    usage: Mapping[str, int] | None = None

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "action": self.action,
            "label": self.label,
            "text": self.text,
            "probs": None if self.probs is None else list(self.probs),
            "logprobs": None if self.logprobs is None else list(self.logprobs),
            "question": self.question,
            "usage": None if self.usage is None else dict(self.usage),
        }


class Agent(Protocol):
    """Sees only the observation and the candidate set (never the rest of `info`).

    `slot` names one of several episodes played at once (the sub-envs of a vector env): each slot keeps its
    own memory and random generator, so `act_many` over K slots chooses exactly what K `act` calls would."""

    def reset(self, seed: int | None = None, slot: int = 0) -> None: ...

    def act(self, observation: Any, candidates: Any, slot: int = 0) -> Act: ...

    def act_many(
        self, observations: Sequence[Any], candidate_sets: Sequence[Any], slots: Sequence[int] | None = None
    ) -> list[Act]: ...


class AgentBase:
    """`act` and a looping `act_many` on top of `act_one(observation, candidates, slot)`; agents that can batch
    (the scorer agent: one `decide_many` per call) override `act_many`."""

    def act(self, observation: Any, candidates: Any, slot: int = 0) -> Act:
        return self.act_many([observation], [candidates], [slot])[0]

    def act_many(
        self, observations: Sequence[Any], candidate_sets: Sequence[Any], slots: Sequence[int] | None = None
    ) -> list[Act]:
        slots = check_batch(observations, candidate_sets, slots)
        return [self.act_one(o, c, s) for o, c, s in zip(observations, candidate_sets, slots)]

    def act_one(self, observation: Any, candidates: Any, slot: int) -> Act:
        raise NotImplementedError


def check_batch(observations: Sequence[Any], candidate_sets: Sequence[Any], slots: Sequence[int] | None) -> list[int]:
    """The slots of a batch (default 0..K-1); ValueError when the lengths differ or a slot repeats."""
    slots = list(range(len(observations))) if slots is None else [int(s) for s in slots]
    if not len(observations) == len(candidate_sets) == len(slots):
        raise ValueError(
            f"act_many needs one candidate set and one slot per observation, got {len(observations)} "
            f"observations, {len(candidate_sets)} candidate sets, {len(slots)} slots"
        )
    if len(set(slots)) != len(slots):
        raise ValueError(f"act_many slots must be distinct (one per sub-env), got {slots}")
    return slots


AGENTS: Registry = Registry("agent")


def make_agent(name: str, **options) -> Agent:
    """Build the agent registered under `name` (options: see each agent's class). A required option given
    as None is an error naming it (e.g. `make_agent("scorer", scorer=None)`)."""
    import inspect

    cls = AGENTS.get(name)
    agent = cls(**options)  # the agent's own option checks come first
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        parameters = {}
    for key, value in options.items():
        parameter = parameters.get(key)
        if value is None and parameter is not None and parameter.default is inspect.Parameter.empty:
            hint = " (build one with jetgym.scorers.make_scorer)" if key == "scorer" else ""
            raise ValueError(f"agent {name!r} needs {key}, got None{hint}")
    if name == "scorer" and not hasattr(options.get("scorer"), "decide_many"):
        raise TypeError(
            f"agent 'scorer' needs a scorer with decide_many (a jetgym scorer), got {type(options.get('scorer')).__name__}"
        )
    return agent


def available_agents() -> list[str]:
    return AGENTS.names()
