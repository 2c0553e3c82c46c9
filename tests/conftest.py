"""Shared fixtures: a deterministic fake scorer registered as "fake"."""

from __future__ import annotations

import os
import zlib

# Tests never reach a model hub: a hub id must fail fast, not retry for half a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from jetgym.scorers import ScorerBase, available_scorers, register_scorer
from jetgym.scorers.decision import make_decision
from jetgym.scorers.types import Usage


def fake_logprob(context: str, candidate: str) -> float:
    """A deterministic stand-in for log p(candidate | context), derived from the texts."""
    return -(zlib.crc32(f"{context}|{candidate}".encode()) % 1000) / 100


class FakeScorer(ScorerBase):
    """Scores by `fake_logprob`; counts scored questions in `calls` and can fail after `fail_after`."""

    name = "fake"
    calls = 0
    fail_after: int | None = None

    def __init__(self, **options):
        self.options = options

    def prepare(self, questions):
        return list(questions)

    def score(self, questions):
        decisions = []
        for question in questions:
            if FakeScorer.fail_after is not None and FakeScorer.calls >= FakeScorer.fail_after:
                raise RuntimeError("fake scorer stopped on purpose")
            FakeScorer.calls += 1
            logprobs = [fake_logprob(str(question.context), c) for c in question.candidates]
            usage = Usage(
                prefix_tokens=len(str(question.context)), candidate_tokens=len(question.candidates), forward_calls=1
            )
            decisions.append(make_decision(question, question.candidates, logprobs, usage))
        return decisions

    def describe(self) -> dict:
        return {"name": "fake", **self.options}


if "fake" not in available_scorers():
    register_scorer("fake")(FakeScorer)


@pytest.fixture
def fake_scorer():
    """The FakeScorer class with its counter reset."""
    FakeScorer.calls, FakeScorer.fail_after = 0, None
    yield FakeScorer
    FakeScorer.calls, FakeScorer.fail_after = 0, None


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run faster on one thread than fighting for two shared cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
