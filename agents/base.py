"""The agent interface, the record of one decision, and the agent registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from jetgym.scorers.registry import Registry


@dataclass(frozen=True)
class Act:
    """One decision: candidate `index` (env action `action`), and, for scoring agents, the distribution."""

    index: int
    action: int
    label: str
    text: str
    probs: tuple[float, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    question: str | None = None
    usage: Mapping[str, int] | None = None

    def to_dict(self) -> dict:
        return {"index": self.index, "action": self.action, "label": self.label, "text": self.text,
                "probs": None if self.probs is None else list(self.probs),
                "logprobs": None if self.logprobs is None else list(self.logprobs),
                "usage": None if self.usage is None else dict(self.usage)}


class Agent(Protocol):
    """Sees only the observation and the candidate set (never the rest of `info`)."""

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, observation: Any, candidates: Any) -> Act: ...


AGENTS: Registry = Registry("agent")


def make_agent(name: str, **options) -> Agent:
    """Build the agent registered under `name` (options: see each agent's class)."""
    return AGENTS.get(name)(**options)


def available_agents() -> list[str]:
    return AGENTS.names()
