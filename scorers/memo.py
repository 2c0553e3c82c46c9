"""Exact memoization of decisions while the weights stay the same.

A scorer's decision is a deterministic function of the question and the weights, so between two weight
changes a question asked again needs no second forward pass. `MemoizedScorer` wraps any scorer: each distinct
question of a `decide_many` call that it has not kept is scored (once, however often it repeats in the call),
the others read the kept decision. `clear()` drops everything; call it whenever the weights change (the
trainable `Policy` does, at every optimizer step). At most `max_bytes` of decisions are kept, the least
recently used dropped first. `scored` and `cached` count the decisions made each way since `take_counts()`.

`question_key(question)` is what makes two questions the same: every field the scorer reads (context,
candidates, kind, labels, gold, id, and the bytes of any image).
"""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from .base import check_questions
from .types import Decision, Question

DEFAULT_MAX_BYTES = 256 * 2**20


def question_key(question: Question) -> bytes:
    """A digest of everything a scorer reads from `question` (image arrays by their bytes)."""
    images = tuple(_image_bytes(image) for image in question.images)
    return hashlib.sha256(pickle.dumps((replace(question, images=(), source=None), images))).digest()


def distinct(questions: Sequence[Question]) -> tuple[list[Question], list[int]]:
    """(the distinct questions in first-seen order, for each question the index of its distinct one)."""
    first: dict[bytes, int] = {}
    unique, where = [], []
    for question in questions:
        key = question_key(question)
        if key not in first:
            first[key] = len(unique)
            unique.append(question)
        where.append(first[key])
    return unique, where


def _image_bytes(image: Any) -> Any:
    if isinstance(image, np.ndarray):
        return (image.dtype.str, image.shape, image.tobytes())
    return image if isinstance(image, str) else pickle.dumps(image)


class MemoizedScorer:
    """A scorer that keeps its decisions until `clear()` (see the module notes); every other attribute is the
    wrapped scorer's."""

    def __init__(self, scorer, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.scorer, self.max_bytes = scorer, max_bytes
        self._kept: OrderedDict[bytes, tuple[Decision, int]] = OrderedDict()
        self.kept_bytes = 0
        self.scored = self.cached = 0

    def __getattr__(self, name: str) -> Any:
        if name == "scorer":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.scorer, name)

    def decide(self, question: Question) -> Decision:
        return self.decide_many([question])[0]

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]:
        """Decisions in the order of the questions; only the questions not kept reach the wrapped scorer."""
        questions = check_questions(questions)
        keys = [question_key(q) for q in questions]
        found: dict[bytes, Decision] = {}
        for key in keys:
            if key in self._kept:
                self._kept.move_to_end(key)
                found[key] = self._kept[key][0]
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first = {key: questions[keys.index(key)] for key in missing}
            for key, decision in zip(missing, self.scorer.decide_many([first[k] for k in missing])):
                found[key] = decision
                self._keep(key, decision)
        self.scored += len(missing)
        self.cached += len(questions) - len(missing)
        return [found[key] for key in keys]

    def peek(self, question: Question) -> Decision | None:
        """The kept decision of `question`, or None; scores nothing, counts nothing."""
        kept = self._kept.get(question_key(question))
        return None if kept is None else kept[0]

    def _keep(self, key: bytes, decision: Decision) -> None:
        size = len(key) + len(pickle.dumps(decision))
        self._kept[key] = (decision, size)
        self.kept_bytes += size
        while self.kept_bytes > self.max_bytes and self._kept:
            _, (_, dropped) = self._kept.popitem(last=False)
            self.kept_bytes -= dropped

    def clear(self) -> None:
        """Forget every kept decision (the weights changed)."""
        self._kept.clear()
        self.kept_bytes = 0

    def take_counts(self) -> dict[str, int]:
        """{"scored": ..., "cached": ...} since the last call, and start counting again."""
        counts = {"scored": self.scored, "cached": self.cached}
        self.scored = self.cached = 0
        return counts
