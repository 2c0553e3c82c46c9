"""Candidate scorers: questions in, normalized decisions out. Importing this package does not import torch."""

from .registry import available_scorers, make_scorer, register_scorer
from .types import Decision, Question, Usage
from . import jet  # noqa: F401  (registers "jet"; torch is imported only when a scorer is built)
from . import fastjev  # noqa: F401  (registers "fastjev"; torch-free at import)

__all__ = ["Decision", "Question", "Usage", "available_scorers", "make_scorer", "register_scorer"]
