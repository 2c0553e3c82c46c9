"""Controllers: an observation and its candidate set in, an action out. Cheap to import (no torch, no vizdoom).

Agents registered here (`make_agent(name, ...)`): `scorer` (asks a candidate scorer, e.g. JET),
`random` (uniform over the candidates) and `scripted` (a small hand-written policy on pixel features).
"""

from .base import Act, Agent, AGENTS, available_agents, make_agent
from .rollout import rollout
from . import baselines, scoring  # noqa: F401  (register the agents)

__all__ = ["Act", "Agent", "AGENTS", "available_agents", "make_agent", "rollout"]
