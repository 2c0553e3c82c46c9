"""FastJEV: compact candidate evaluation (T trie sharing, S shared context anchoring, P decision-guided
pruning) behind the `fastjev` scorer. Importing this package does not import torch."""

from .options import COMPONENTS, SCHEDULES, FastJevOptions, parse_components
from .scorer import FastJevScorer

__all__ = ["COMPONENTS", "SCHEDULES", "FastJevOptions", "FastJevScorer", "parse_components"]
