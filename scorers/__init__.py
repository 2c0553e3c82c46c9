"""Candidate scorers: questions in, normalized decisions out. Importing this package does not import torch;
the backends (`jet`, `fastjev`) are registered as "module:Class" strings and imported when first built."""

from .base import Scorer, ScorerBase, available_scorers, make_scorer, option_names, register_scorer
from .types import Decision, Question, Usage

__all__ = [
    "Decision",
    "Question",
    "Scorer",
    "ScorerBase",
    "Usage",
    "available_scorers",
    "make_scorer",
    "option_names",
    "register_scorer",
]
