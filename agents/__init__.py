"""Controllers: an observation and its candidate set in, an action out. Cheap to import (no torch, no vizdoom).

Agents registered here (`make_agent(name, ...)`): `scorer` (asks a candidate scorer, e.g. JET, on any env with
discrete actions), `random` (uniform over the admissible candidates) and `scripted` (hand-written experts: ViZDoom on
pixel features, Taxi by shortest routes). Describers (`jetgym.agents.describers`) turn observations into text.
"""

from .base import Act, Agent, AgentBase, AGENTS, available_agents, make_agent
from .describers import DESCRIBERS, available_describers, make_describer, register_describer
from .rollout import rollout
from . import baselines, describers_minigrid, scoring  # noqa: F401  (register the agents and the minigrid describer)

__all__ = [
    "Act",
    "Agent",
    "AgentBase",
    "AGENTS",
    "DESCRIBERS",
    "available_agents",
    "available_describers",
    "make_agent",
    "make_describer",
    "register_describer",
    "rollout",
]
