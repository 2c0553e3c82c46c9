"""The readout: per-node log-probs -> one logit per candidate, in the original candidate order.

`SequenceLogLikelihood` is the JET rule (sum of the token log-probs along each candidate's path).
A model with its own decision head (and abstention logit) plugs in another callable with this signature.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from .trie import CandidateTrie


class Readout(Protocol):
    def __call__(self, trie: CandidateTrie, node_logprobs: Sequence[float]) -> list[float]: ...


class SequenceLogLikelihood:
    """z_i = sum over candidate i's path of log p(node | its history), in float64."""

    def __call__(self, trie: CandidateTrie, node_logprobs: Sequence[float]) -> list[float]:
        return [float(sum(node_logprobs[n] for n in path)) for path in trie.paths]
