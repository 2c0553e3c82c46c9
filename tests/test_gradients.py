"""Differentiable candidate scoring: value and gradient of every schedule equal the independent path."""

from __future__ import annotations

import random

import pytest
import torch

from jetgym.scorers.execution import score_independent
from jetgym.scorers.gradients import FrozenTrunk, candidate_logprobs
from jetgym.scorers.prompts import EncodedQuestion

from tiny_models import frame_questions, random_question, tiny_llama, tiny_qwen3


def tolerance(question: EncodedQuestion) -> float:
    return 1e-4 + 1e-5 * question.longest


def grads(model, questions, schedule, **options):
    """Candidate log-likelihoods, value-head states and the gradient of a fixed loss over both."""
    model.zero_grad()
    scored = candidate_logprobs(model, questions, schedule, hidden=True, **options)
    weights = torch.Generator().manual_seed(3)
    loss = sum(
        (s.logprobs * torch.randn(len(s.logprobs), generator=weights, dtype=s.logprobs.dtype)).sum() + s.hidden.sum()
        for s in scored
    )
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


@pytest.mark.parametrize("make", [tiny_llama, tiny_qwen3])
def test_frozen_trunk_states_give_the_full_pass(make):
    model = make()
    top = model.config.num_hidden_layers - 1
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(f"layers.{top}." in name)  # a LoRA on the last layer leaves the rest frozen
    trunk_runs = []
    model.model.layers[0].register_forward_hook(lambda *_: trunk_runs.append(1))
    rng = random.Random(7)
    questions = [random_question(rng) for _ in range(5)] + frame_questions(rng, 12, [0, 3, 5, 2])
    full, full_grads = grads(model, questions, "packed", max_batch_tokens=256)
    plain, _ = grads(model, questions, "independent", max_batch_tokens=1)
    for trunk in (FrozenTrunk(top), FrozenTrunk(top, max_bytes=1)):  # every question kept, or one at a time
        grads(model, questions, "packed", max_batch_tokens=256, trunk=trunk)
        trunk_runs.clear()
        kept, kept_grads = grads(model, questions, "packed", max_batch_tokens=256, trunk=trunk)
        assert bool(trunk_runs) == (trunk.max_bytes == 1)  # kept states: the frozen layers do not run again
        assert len(trunk.kept) == (len(questions) if trunk.max_bytes > 1 else 1)
        for question, a, b, c in zip(questions, kept, full, plain):
            assert torch.allclose(a.logprobs, b.logprobs, atol=1e-6) and torch.allclose(a.hidden, b.hidden, atol=1e-6)
            assert torch.allclose(a.logprobs.double(), c.logprobs.double(), atol=tolerance(question))
        assert kept_grads.keys() == full_grads.keys() and all(f"layers.{top}." in name for name in kept_grads)
        for name, grad in kept_grads.items():
            assert torch.allclose(grad, full_grads[name], atol=1e-5 * max(1.0, grad.abs().max().item())), name


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
    with pytest.raises(ValueError, match="a frozen trunk is kept for the packed schedule only, not 'independent'"):
        candidate_logprobs(model, [question], "independent", trunk=FrozenTrunk(1))
