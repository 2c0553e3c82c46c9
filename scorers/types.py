"""Frozen value types: the question a scorer answers and the decision it returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

from .registry import check_choice

QuestionKind = Literal["categorical", "binary", "ordinal"]
KINDS: tuple[str, ...] = ("categorical", "binary", "ordinal")
DEFAULT_BINARY_TEXTS: tuple[str, str] = ("No", "Yes")


def _as_tuple(value: Sequence | None) -> tuple | None:
    return None if value is None else tuple(value)


@dataclass(frozen=True)
class Question:
    """One decision to score.

    context: one user message (str) or a list of chat messages ({"role", "content"}).
    candidates: the answer texts; for `binary` the (false, true) pair, defaulting to the scorer's
        binary texts ("No", "Yes"); for `ordinal` the levels in order.
    labels: candidate ids distinct from the texts (default: the texts' indices as strings).
    gold: the correct answer, as a label or a candidate index (optional, for evaluation).
    images: images shown with the context (arrays or paths; vision-language models only).
    """

    context: str | tuple[dict, ...]
    candidates: tuple[str, ...] | None = None
    kind: QuestionKind = "categorical"
    labels: tuple[str, ...] | None = None
    gold: str | int | None = None
    images: tuple[Any, ...] = ()
    id: str | None = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if not isinstance(self.context, str):
            set_("context", tuple(dict(m) for m in self.context))
        set_("candidates", _as_tuple(self.candidates))
        set_("labels", _as_tuple(self.labels))
        set_("images", tuple(self.images))
        self._validate()

    def _validate(self):
        check_choice("question kind", self.kind, KINDS)
        if isinstance(self.context, str):
            if not self.context:
                raise ValueError("question context is empty")
        else:
            if not self.context:
                raise ValueError("question context has no messages")
            for message in self.context:
                if set(message) < {"role", "content"}:
                    raise ValueError(f"chat message {message!r} needs 'role' and 'content'")
        if self.candidates is None:
            if self.kind != "binary":
                raise ValueError(f"a {self.kind} question needs candidates")
        else:
            validate_candidates(self.candidates, self.kind)
        if self.labels is not None:
            if self.candidates is None or len(self.labels) != len(self.candidates):
                raise ValueError("labels must match the candidates one to one")
            if len(set(self.labels)) != len(self.labels):
                raise ValueError(f"labels must be distinct, got {list(self.labels)}")


def validate_candidates(candidates: Sequence[str], kind: str) -> None:
    """Raise ValueError unless the candidate texts are admissible for this kind of question."""
    if len(candidates) == 0:
        raise ValueError("candidate list is empty")
    for text in candidates:
        if not isinstance(text, str) or not text:
            raise ValueError(f"every candidate must be a non-empty string, got {text!r}")
    if kind == "binary" and len(candidates) != 2:
        raise ValueError(f"a binary question needs exactly 2 candidates (false, true), got {len(candidates)}")
    if kind == "ordinal" and len(candidates) < 2:
        raise ValueError(f"an ordinal question needs at least 2 levels, got {len(candidates)}")
    if kind in ("binary", "ordinal") and len(set(candidates)) != len(candidates):
        raise ValueError(f"{kind} candidate texts must be distinct, got {list(candidates)}")


@dataclass(frozen=True)
class Usage:
    """Work done for one decision. `forward_calls` counts the model calls the question took part in
    (with cross-question packing one call serves several questions)."""

    prefix_tokens: int = 0
    candidate_tokens: int = 0
    forward_calls: int = 0
    cache_bytes: int = 0
    image_tokens: int = 0  # visual placeholder tokens in the prefix (counted in prefix_tokens too)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """A normalized distribution over the candidates and the choice made from it."""

    kind: QuestionKind
    candidates: tuple[str, ...]
    labels: tuple[str, ...]
    logprobs: tuple[float, ...]
    probs: tuple[float, ...]
    choice: int
    usage: Usage = field(default_factory=Usage)
    gold: int | None = None
    id: str | None = None
    trace: str | None = None  # the reasoning trace that joined the context, when reasoning is on

    @property
    def label(self) -> str:
        return self.labels[self.choice]

    @property
    def text(self) -> str:
        return self.candidates[self.choice]

    @property
    def p_true(self) -> float:
        if self.kind != "binary":
            raise AttributeError(f"p_true is defined for binary questions, this one is {self.kind}")
        return self.probs[1]

    @property
    def expected_index(self) -> float:
        if self.kind != "ordinal":
            raise AttributeError(f"expected_index is defined for ordinal questions, this one is {self.kind}")
        return sum(i * p for i, p in enumerate(self.probs))

    @property
    def gold_nll(self) -> float | None:
        """-log of the total probability of every candidate whose text equals the gold text."""
        if self.gold is None:
            return None
        gold_text = self.candidates[self.gold]
        mass = sum(p for text, p in zip(self.candidates, self.probs) if text == gold_text)
        return -math.log(mass) if mass > 0 else math.inf

    @property
    def correct(self) -> bool | None:
        """True when the chosen text equals the gold text (any equivalent label is accepted)."""
        if self.gold is None:
            return None
        return self.candidates[self.choice] == self.candidates[self.gold]

    def to_dict(self) -> dict:
        """The response object written to responses.jsonl."""
        row = {
            "id": self.id,
            "probs": list(self.probs),
            "logprobs": list(self.logprobs),
            "choice": self.label,
            "gold": None if self.gold is None else self.labels[self.gold],
            "correct": self.correct,
            "gold_nll": self.gold_nll,
            "usage": self.usage.to_dict(),
        }
        if self.trace is not None:
            row["trace"] = self.trace
        return row
