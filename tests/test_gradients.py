"""Differentiable candidate scoring: value and gradient of every schedule equal the independent path."""

from __future__ import annotations

import random

import pytest
import torch

from jetgym.scorers.execution import score_independent
from jetgym.scorers.gradients import candidate_logprobs
from jetgym.scorers.prompts import EncodedQuestion

from tiny_models import frame_questions, random_question, tiny_llama


def tolerance(question: EncodedQuestion) -> float:
    return 1e-4 + 1e-5 * question.longest


def grads(model, questions, schedule, **options):
    """Candidate log-likelihoods, value-head states and the gradient of a fixed loss over both."""
    model.zero_grad()
    scored = candidate_logprobs(model, questions, schedule, hidden=True, **options)
    weights = torch.Generator().manual_seed(3)
    loss = sum((s.logprobs * torch.randn(len(s.logprobs), generator=weights, dtype=s.logprobs.dtype)).sum()
               + s.hidden.sum() for s in scored)
    loss.backward()
    return scored, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("min_shared", [0, 4])
def test_packed_value_and_gradient_equal_independent(min_shared):
    model = tiny_llama()
    rng = random.Random(7)
    questions = [random_question(rng) for _ in range(5)] + frame_questions(rng, 12, [0, 3, 5, 2])
    packed, packed_grads = grads(model, questions, "packed", max_batch_tokens=256, min_shared=min_shared)
    plain, plain_grads = grads(model, questions, "independent", max_batch_tokens=1)
    for question, a, b in zip(questions, packed, plain):
        assert torch.allclose(a.logprobs.double(), b.logprobs.double(), atol=tolerance(question))
        assert torch.allclose(a.hidden, b.hidden, atol=1e-5)
        reference = score_independent(model, question).logprobs
        assert a.logprobs.tolist() == pytest.approx(reference, abs=tolerance(question))
    assert packed_grads.keys() == plain_grads.keys() and packed_grads
    for name, grad in packed_grads.items():
        scale = plain_grads[name].abs().max().item() + 1e-6
        assert (grad - plain_grads[name]).abs().max().item() <= 1e-4 * max(1.0, scale), name


def test_batched_sequences_equal_one_at_a_time():
    model = tiny_llama()
    rng = random.Random(11)
    questions = [random_question(rng) for _ in range(4)]
    batched, batched_grads = grads(model, questions, "independent", max_batch_tokens=200)
    single, single_grads = grads(model, questions, "sequential")
    for question, a, b in zip(questions, batched, single):
        assert torch.allclose(a.logprobs, b.logprobs, atol=tolerance(question))
    for name, grad in batched_grads.items():
        assert torch.allclose(grad, single_grads[name], atol=1e-4), name


def test_bf16_autocast_stays_close_to_fp32():
    model = tiny_llama()
    rng = random.Random(5)
    questions = [random_question(rng, 4) for _ in range(3)]
    exact = candidate_logprobs(model, questions, "packed")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = candidate_logprobs(model, questions, "packed")
    for a, b in zip(exact, low):
        assert b.logprobs.dtype == torch.float32
        assert torch.allclose(a.logprobs, b.logprobs, atol=0.1 + 0.02 * a.logprobs.abs().max().item())
    low[0].logprobs.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_refuses_what_it_cannot_compute():
    model = tiny_llama()
    question = EncodedQuestion(tuple(range(1, 40)), ((1, 2, 3), (4,)))
    with pytest.raises(ValueError, match="max_batch_tokens=16: raise max_batch_tokens"):
        candidate_logprobs(model, [question], "packed", max_batch_tokens=16)
    with pytest.raises(ValueError, match="unknown schedule 'batched' for gradients; known: packed, independent"):
        candidate_logprobs(model, [question], "batched")
