"""Frozen value types: the question a scorer answers and the decision it returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Sequence

from .registry import check_choice

QuestionKind = Literal["categorical", "binary", "ordinal"]
KINDS: tuple[str, ...] = ("categorical", "binary", "ordinal")
DEFAULT_BINARY_TEXTS: tuple[str, str] = ("No", "Yes")


ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
MESSAGE_KEYS: tuple[str, ...] = ("role", "content", "name", "tool_calls", "tool_call_id")


def _as_tuple(value: Sequence | None, name: str) -> tuple | None:
    """A sequence field as a tuple; one string (which would become its characters) is refused."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a list of texts, not one string {value!r}: write [{value!r}]")
    if isinstance(value, Mapping):  # iterating a mapping gives its keys, which would be scored as the texts
        raise TypeError(
            f"{name} must be a list of texts, not a mapping {dict(value)!r}: pass a list (for a "
            f"{{label: text}} mapping m: candidates=list(m.values()), labels=list(m))"
        )
    try:
        return tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a list of texts, got {type(value).__name__} {value!r}") from None


def check_text(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate, e.g. from a file read with 'surrogateescape')."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{what} holds a lone surrogate {text[error.start]!r} at position {error.start}: not valid Unicode text "
            f"(was it decoded with errors='surrogateescape'?); fix or re-decode the text"
        ) from None


def _as_images(images: Any) -> tuple:
    """Images as a tuple; one path or one array (which would become characters or rows) is refused."""
    import os

    if images is None:
        return ()
    if isinstance(images, (str, bytes, os.PathLike)):
        raise TypeError(
            f"images must be a list of images (arrays or paths), not one path {images!r}: write [{images!r}]"
        )
    if getattr(images, "ndim", None) in (2, 3) or hasattr(images, "getpixel"):
        raise TypeError("images must be a list of images, not one image: write [image]")
    try:
        return tuple(images)
    except TypeError:
        raise TypeError(f"images must be a list of images (arrays or paths), got {type(images).__name__}") from None


def _as_messages(context: Any) -> str | tuple[dict, ...]:
    """The context as one string or a tuple of checked chat messages."""
    if isinstance(context, str):
        if not context.strip():
            raise ValueError(
                "question context is empty" + (" (only whitespace)" if context else "") + ": give the question's text"
            )
        check_text(context, "question context")
        return context
    if context is None or isinstance(context, (bytes, int, float)) or not isinstance(context, Sequence):
        raise TypeError(
            f"question context must be one string or a list of chat messages "
            f"{{'role': ..., 'content': ...}}, got {type(context).__name__} {context!r}"
        )
    if not context:
        raise ValueError("question context has no messages")
    messages = []
    for i, message in enumerate(context):
        if not isinstance(message, dict):
            raise TypeError(
                f"chat message {i} must be a mapping {{'role': ..., 'content': ...}}, got "
                f"{type(message).__name__} {message!r} (a plain text context is one string, not a list)"
            )
        message = dict(message)
        missing = [key for key in ("role", "content") if key not in message]
        if missing:
            raise ValueError(
                f"chat message {i} needs 'role' and 'content'; it lacks {' and '.join(repr(k) for k in missing)} "
                f"(it has {', '.join(repr(k) for k in message) or 'no keys'}): write {{'role': ..., 'content': ...}}"
            )
        unknown = [key for key in message if key not in MESSAGE_KEYS]
        if unknown:
            raise ValueError(
                f"chat message {i} has unknown key(s) {', '.join(repr(k) for k in unknown)}; "
                f"known: {', '.join(MESSAGE_KEYS)}"
            )
        check_choice(f"chat message {i} role", message["role"], ROLES)
        content = message["content"]
        if isinstance(content, str):
            if not content.strip() and not message.get("tool_calls"):
                raise ValueError(
                    f"chat message {i} ({message['role']}) has empty content"
                    + (" (only whitespace)" if content else "")
                    + ": give it a text, or leave the message out"
                )
            check_text(content, f"chat message {i} content")
        elif (
            isinstance(content, (list, tuple)) and content and all(isinstance(p, dict) and "type" in p for p in content)
        ):
            for part in content:  # a content-parts list (vision-language chat templates)
                if isinstance(part.get("text"), str):
                    check_text(part["text"], f"chat message {i} content")
        else:
            raise TypeError(
                f"chat message {i} 'content' must be a string (or a list of {{'type': ...}} parts), "
                f"got {type(content).__name__} {content!r}"
            )
        messages.append(message)
    return tuple(messages)


@dataclass(frozen=True)
class Question:
    """One decision to score.

    context: one user message (str) or a list of chat messages ({"role", "content"}; roles system, user,
        assistant, tool; content a string or a list of {"type": ...} parts).
    candidates: the answer texts; for `binary` the (false, true) pair, defaulting to the scorer's
        binary texts ("No", "Yes"); for `ordinal` the levels in order.
    labels: candidate ids distinct from the texts (default: the texts' indices as strings).
    gold: the correct answer, as a label or a candidate index (optional, for evaluation).
    images: images shown with the context (arrays or paths; vision-language models only).
    source: where the question came from (`file:line` for question files), named in errors; not compared.
    """

    context: str | tuple[dict, ...]
    candidates: tuple[str, ...] | None = None
    kind: QuestionKind = "categorical"
    labels: tuple[str, ...] | None = None
    gold: str | int | None = None
    images: tuple[Any, ...] = ()
    id: str | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("context", _as_messages(self.context))
        set_("candidates", _as_tuple(self.candidates, "candidates"))
        set_("labels", _as_tuple(self.labels, "labels"))
        set_("images", _as_images(self.images))
        self._validate()

    def _validate(self):
        check_choice("question kind", self.kind, KINDS)
        if self.candidates is None:
            if self.kind != "binary":
                raise ValueError(f"a {self.kind} question needs candidates")
        else:
            validate_candidates(self.candidates, self.kind)
        if self.labels is not None:
            for label in self.labels:
                if not isinstance(label, str) or not label:
                    raise TypeError(f"every label must be a non-empty string, got {label!r} in {list(self.labels)}")
                check_text(label, "label")
            if self.candidates is None or len(self.labels) != len(self.candidates):
                raise ValueError("labels must match the candidates one to one")
            if len(set(self.labels)) != len(self.labels):
                raise ValueError(f"labels must be distinct, got {list(self.labels)}")
        if isinstance(self.gold, bool) or not isinstance(self.gold, (str, int, type(None))):
            raise TypeError(f"gold must be a label (string) or a candidate index (int), got {self.gold!r}")


def validate_candidates(candidates: Sequence[str], kind: str) -> None:
    """Raise ValueError unless the candidate texts are admissible for this kind of question."""
    if isinstance(candidates, (str, bytes)):
        raise TypeError(f"candidates must be a list of texts, not one string {candidates!r}: write [{candidates!r}]")
    if len(candidates) == 0:
        raise ValueError("candidate list is empty")
    for text in candidates:
        if not isinstance(text, str) or not text:
            raise ValueError(f"every candidate must be a non-empty string, got {text!r}")
        check_text(text, "candidate")
    if kind == "binary" and len(candidates) != 2:
        raise ValueError(f"a binary question needs exactly 2 candidates (false, true), got {len(candidates)}")
    if kind == "ordinal" and len(candidates) < 2:
        raise ValueError(f"an ordinal question needs at least 2 levels, got {len(candidates)}")
    if kind in ("binary", "ordinal") and len(set(candidates)) != len(candidates):
        raise ValueError(f"{kind} candidate texts must be distinct, got {list(candidates)}")


@dataclass(frozen=True)
class Usage:
    """Work done for one decision. `forward_calls` counts the model calls the question took part in
    (with cross-question packing one call serves several questions). A prefix part shared with other
    questions of the same call (`min_shared_prefix`) is split evenly over them in `prefix_tokens`."""

    prefix_tokens: int = 0
    candidate_tokens: int = 0
    forward_calls: int = 0
    cache_bytes: int = 0
    image_tokens: int = 0  # visual placeholder tokens in the prefix (counted in prefix_tokens too)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """A normalized distribution over the candidates and the choice made from it.

    logprobs: the raw JET log-likelihoods log p(c|x), never changed by a correction;
    scores: what the softmax runs on, the logprobs corrected by `normalization` (None: the logprobs);
    probs: softmax(scores / temperature); prior_logprobs: log p(c|reference context) for `contextual` and
    `pmi`; prior_usage: the work spent on priors for this decision (none when every prior was cached).
    """

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
    scores: tuple[float, ...] | None = None
    normalization: str = "none"
    temperature: float = 1.0
    prior_logprobs: tuple[float, ...] | None = None
    prior_usage: Usage | None = None

    @property
    def corrected(self) -> tuple[float, ...]:
        """The scores the probabilities come from (the logprobs when no correction is set)."""
        return self.logprobs if self.scores is None else self.scores

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
        """-log of the total probability of every candidate whose text equals the gold text, computed from the
        scores with log-sum-exp (finite even when the gold probability underflows to 0 in `probs`)."""
        if self.gold is None:
            return None
        gold_text = self.candidates[self.gold]
        return self.nll_of([i for i, text in enumerate(self.candidates) if text == gold_text])

    def nll_of(self, indices: Sequence[int]) -> float:
        """-log of the total probability of the candidates at `indices` (log-sum-exp over the scores)."""
        scaled = [s / self.temperature for s in self.corrected]
        return logsumexp(scaled) - logsumexp([scaled[i] for i in indices])

    @property
    def correct(self) -> bool | None:
        """True when the chosen text equals the gold text (any equivalent label is accepted)."""
        if self.gold is None:
            return None
        return self.candidates[self.choice] == self.candidates[self.gold]

    def to_dict(self) -> dict:
        """The response object written to responses.jsonl (corrections add their fields only when set)."""
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
        row["labels"] = list(self.labels)
        if self.gold is not None:
            gold_labels = [
                label for label, text in zip(self.labels, self.candidates) if text == self.candidates[self.gold]
            ]
            if len(gold_labels) > 1:  # equivalent labels: every one with the gold text
                row["gold_labels"] = gold_labels
        if self.normalization != "none":
            row["normalization"] = self.normalization
            row["scores"] = list(self.corrected)
        if self.temperature != 1.0:
            row["temperature"] = self.temperature
        if self.prior_logprobs is not None:
            row["prior_logprobs"] = list(self.prior_logprobs)
        if self.prior_usage is not None:
            row["prior_usage"] = self.prior_usage.to_dict()
        return row


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) in float64 without overflow or underflow (-inf for no values or all -inf)."""
    top = max(values, default=-math.inf)
    if top == -math.inf:
        return -math.inf
    if top == math.inf:
        return math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))
