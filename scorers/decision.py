"""The JET decision rule: candidate log-likelihoods -> (optional correction) -> normalized distribution -> choice."""

from __future__ import annotations

import math
from typing import Sequence

from .priors import corrected_scores
from .types import Decision, Question, Usage


def softmax(scores: Sequence[float], temperature: float = 1.0) -> tuple[float, ...]:
    """softmax(scores / temperature) in float64: the candidates' distribution."""
    scaled = scores if temperature == 1.0 else [s / temperature for s in scores]
    top = max(scaled)
    weights = [math.exp(s - top) for s in scaled]
    total = sum(weights)
    return tuple(w / total for w in weights)


def first_argmax(values: Sequence[float]) -> int:
    """Index of the largest value; ties go to the earliest candidate."""
    best = 0
    for i, value in enumerate(values):
        if value > values[best]:
            best = i
    return best


def draw(
    scores: Sequence[float], temperature: float, rng, explore: float = 0.0, towards: Sequence[int] | None = None
) -> int:
    """A draw from softmax(scores / temperature) mixed with weight `explore` with the uniform distribution over
    the candidates `towards` (None: all of them); `rng` is a numpy Generator."""
    import numpy as np

    scaled = np.array(scores, dtype=np.float64) / temperature
    q = np.exp(scaled - scaled.max())
    p = (1 - explore) * q / q.sum()
    if towards is None:
        p += explore / len(q)
    else:
        p[list(towards)] += explore / len(towards)
    return int(rng.choice(len(p), p=p / p.sum()))


def resolve_gold(question: Question, labels: Sequence[str]) -> int | None:
    """The gold answer as a candidate index (gold may be given as a label or an index)."""
    gold = question.gold
    if gold is None:
        return None
    if isinstance(gold, int) and not isinstance(gold, bool):
        if not 0 <= gold < len(labels):
            raise ValueError(f"gold index {gold} is out of range for {len(labels)} candidates")
        return gold
    if gold not in labels:
        raise ValueError(f"gold {gold!r} is not one of the labels {list(labels)}")
    return list(labels).index(gold)


def make_decision(
    question: Question,
    candidates: Sequence[str],
    logprobs: Sequence[float],
    usage: Usage,
    trace: str | None = None,
    *,
    normalization: str = "none",
    token_counts: Sequence[int] | None = None,
    prior_logprobs: Sequence[float] | None = None,
    temperature: float = 1.0,
    prior_usage: Usage | None = None,
) -> Decision:
    """Apply the decision rule of the question's kind to the candidates' log-likelihoods.

    `normalization` corrects the scores first (`jetgym.scorers.priors.corrected_scores`: `token` needs the
    candidates' `token_counts`, `contextual`/`pmi` their `prior_logprobs`); probs = softmax(scores /
    temperature). The raw `logprobs` are kept unchanged in the decision."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    labels = question.labels or tuple(str(i) for i in range(len(candidates)))
    raw = tuple(float(lp) for lp in logprobs)
    scores = corrected_scores(normalization, raw, candidates, token_counts, prior_logprobs)
    probs = softmax(scores, temperature)
    return Decision(
        kind=question.kind,
        candidates=tuple(candidates),
        labels=tuple(labels),
        logprobs=raw,
        probs=probs,
        choice=first_argmax(probs),
        usage=usage,
        gold=resolve_gold(question, labels),
        id=question.id,
        trace=trace,
        scores=None if normalization == "none" else scores,
        normalization=normalization,
        temperature=float(temperature),
        prior_logprobs=None if prior_logprobs is None else tuple(float(p) for p in prior_logprobs),
        prior_usage=prior_usage,
    )
