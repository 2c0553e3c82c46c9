"""Candidate-prior corrections of the JET scores (optional; the raw log-likelihoods never change).

Under the JET rule a short, frequent phrase can win whatever the context says. `normalization` corrects
each candidate's score before the softmax over the candidates:
- `none`: the JET rule, s(c) = log p(c|x);
- `token`: mean log-prob per candidate token, s(c) = log p(c|x) / tokens(c) (lm-eval's per-token norm);
- `byte`: per UTF-8 byte of the candidate text, s(c) = log p(c|x) / bytes(c) (lm-eval's `acc_norm`
  divides by characters);
- `contextual`: contextual calibration (Zhao et al. 2021, diagonal W, b = 0): q(c) ∝ p(c|x) / p(c|x_cf),
  i.e. s(c) = log p(c|x) - log p(c|x_cf) with the content-free context x_cf (default "N/A");
- `pmi`: domain-conditional PMI (Holtzman et al. 2021): s(c) = log p(c|x) - log p(c|x_dom) with the
  neutral premise x_dom (default "Answer:").
The two prior corrections are one computation with different reference contexts. The reference context is
`neutral_premise` rendered with the scorer's template as one user turn, and each candidate keeps its own
tokens (tokenized on its own, as always), so the prior of a text does not depend on the question: a
`PriorCache` keeps it for the scorer's lifetime, and a fixed candidate set (Doom's controls) costs one
prior computation per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

NORMALIZATIONS: tuple[str, ...] = ("none", "token", "byte", "contextual", "pmi")
PRIOR_NORMALIZATIONS: tuple[str, ...] = ("contextual", "pmi")
DEFAULT_PREMISES: dict[str, str] = {"contextual": "N/A", "pmi": "Answer:"}


def needs_prior(normalization: str) -> bool:
    return normalization in PRIOR_NORMALIZATIONS


def premise_of(normalization: str, neutral_premise: str | None) -> str:
    """The reference context of a prior correction: the option, else the normalization's default."""
    return DEFAULT_PREMISES[normalization] if neutral_premise is None else neutral_premise


def corrected_scores(
    normalization: str,
    logprobs: Sequence[float],
    texts: Sequence[str],
    token_counts: Sequence[int] | None = None,
    prior_logprobs: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """The scores the softmax runs on, one per candidate (see the module notes)."""
    logprobs = [float(lp) for lp in logprobs]
    if normalization == "none":
        return tuple(logprobs)
    if normalization == "token":
        if token_counts is None or len(token_counts) != len(logprobs):
            raise ValueError("normalization 'token' needs each candidate's token count")
        return tuple(lp / n for lp, n in zip(logprobs, token_counts))
    if normalization == "byte":
        return tuple(lp / len(text.encode("utf-8")) for lp, text in zip(logprobs, texts))
    if normalization in PRIOR_NORMALIZATIONS:
        if prior_logprobs is None or len(prior_logprobs) != len(logprobs):
            raise ValueError(f"normalization {normalization!r} needs each candidate's prior log-likelihood")
        return tuple(lp - float(prior) for lp, prior in zip(logprobs, prior_logprobs))
    raise ValueError(f"unknown normalization {normalization!r}; known: {', '.join(NORMALIZATIONS)}")


@dataclass
class PriorCache:
    """Prior log-likelihoods by candidate text under one scorer's reference context (its options are frozen).

    `computed` counts the texts whose prior was computed, `forward_calls` the model calls spent on them."""

    logprobs: dict[str, float] = field(default_factory=dict)
    computed: int = 0
    forward_calls: int = 0

    def missing(self, texts_per_question: Sequence[Sequence[str]]) -> tuple[str, ...]:
        """The texts not cached yet, each once, in first-seen order."""
        return tuple(dict.fromkeys(t for texts in texts_per_question for t in texts if t not in self.logprobs))

    def add(self, texts: Sequence[str], logprobs: Sequence[float], forward_calls: int) -> None:
        self.logprobs.update(zip(texts, (float(lp) for lp in logprobs)))
        self.computed += len(texts)
        self.forward_calls += forward_calls

    def lookup(self, texts: Sequence[str]) -> tuple[float, ...]:
        return tuple(self.logprobs[t] for t in texts)


def encode_prior(loaded, template: str, premise: str, texts: Sequence[str]):
    """The reference context and the candidate texts as one question (as the scorer encodes a text-only
    question; the candidates' tokens are the same as in every other question)."""
    if loaded.kind == "vision" and template == "chat":
        from .vision import encode_vision

        return encode_vision(loaded.processor, premise, (), list(texts), template, loaded.window)
    from .prompts import encode

    return encode(loaded.tokenizer, premise, list(texts), template, loaded.window)


class Corrections:
    """A scorer's corrections: which prior texts a batch still needs, and the decision-rule arguments.

    Usage in `score`: `extra = corrections.prior_questions(loaded, candidate sets)` joins the batch's model
    calls (the same schedule as the questions); `corrections.take(extra_results)` caches what they computed;
    `corrections.arguments(candidates, token_counts)` gives `make_decision` its keyword arguments."""

    def __init__(self, options):
        self.normalization = options.normalization
        self.temperature = options.temperature
        self.template = options.template
        self.premise = (
            premise_of(self.normalization, options.neutral_premise) if needs_prior(self.normalization) else None
        )
        self.cache = PriorCache()
        self._pending: tuple[str, ...] = ()
        self._usage = None

    def prior_questions(self, loaded, candidate_sets: Sequence[Sequence[str]]) -> list:
        """[] or one encoded question holding every candidate text whose prior is not cached yet."""
        self._pending, self._usage = (), None
        if self.premise is None:
            return []
        self._pending = self.cache.missing(candidate_sets)
        return [encode_prior(loaded, self.template, self.premise, self._pending)] if self._pending else []

    def take(self, results: Sequence) -> None:
        """Cache the priors of `prior_questions`' texts from their `Scored` results."""
        for result in results:
            self.cache.add(self._pending, result.logprobs, result.work.forward_calls)
            self._usage = result.work.usage()

    def arguments(self, candidates: Sequence[str], token_counts: Sequence[int] | None = None) -> dict:
        """`make_decision`'s keyword arguments for one question (the prior work goes to the first question
        that needed a prior computed in this batch)."""
        args = {"normalization": self.normalization, "temperature": self.temperature}
        if self.normalization == "token":
            args["token_counts"] = token_counts
        if self.premise is not None:
            args["prior_logprobs"] = self.cache.lookup(candidates)
            if self._usage is not None and set(candidates) & set(self._pending):
                args["prior_usage"], self._usage = self._usage, None
        return args
