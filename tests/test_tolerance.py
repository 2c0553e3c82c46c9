"""The stated fp32 tolerance between a fast schedule and the `independent` reference, tested as stated:
|delta log p(c|x)| <= 1e-4 + 1e-5 * (tokens of c). fp32 rounding grows with the candidate's length (issue 12,
item 11: a ~2,400-token candidate differed by 1.2e-4), so a flat 1e-4 is promised only for short candidates."""

from __future__ import annotations

import random

import pytest

from jetgym.scorers import execution
from jetgym.scorers.prompts import EncodedQuestion
from tiny_models import VOCAB, tiny_llama

ABSOLUTE, PER_TOKEN = 1e-4, 1e-5


def tolerance(tokens: int) -> float:
    """The promised bound for a candidate of `tokens` tokens (docs/reliability.md)."""
    return ABSOLUTE + PER_TOKEN * tokens


def check_within(fast, reference, question: EncodedQuestion) -> None:
    for got, want, tokens in zip(fast, reference, (len(c) for c in question.continuations)):
        assert abs(got - want) <= tolerance(tokens), (got - want, tokens)


def test_long_candidates_on_a_tiny_model():
    rng = random.Random(11)
    model = tiny_llama()
    prefix = tuple(rng.randrange(VOCAB) for _ in range(20))
    question = EncodedQuestion(prefix, tuple(tuple(rng.randrange(VOCAB) for _ in range(n)) for n in (3, 120, 480)))
    reference = execution.score_independent(model, question).logprobs
    for fast in (execution.score_packed(model, question, 4096), execution.score_batched(model, question, 4096)):
        check_within(fast.logprobs, reference, question)


@pytest.mark.slow
def test_a_2400_token_candidate_on_the_embedded_model():
    from jetgym.scorers.models import load_model
    from jetgym.scorers.prompts import encode

    loaded = load_model("smollm2-135m-instruct")
    words = " ".join(f"step {i} of the plan" for i in range(480))
    question = encode(loaded.tokenizer, "Describe the plan.", [" Short answer.", " " + words], "chat", loaded.window)
    assert len(question.continuations[1]) > 2000
    reference = execution.score_independent(loaded.model, question).logprobs
    packed = execution.score_packed(loaded.model, question, 8192).logprobs
    check_within(packed, reference, question)
    print("long-candidate delta", [p - r for p, r in zip(packed, reference)], len(question.continuations[1]))
