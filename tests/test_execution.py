"""Every schedule equals the independent reference (one full forward per candidate) within 1e-4 in fp32."""

import random

import pytest

from jetgym.scorers import execution
from tiny_models import random_question, tiny_llama, tiny_qwen3

TOLERANCE = 1e-4
MODELS = {"llama-sdpa": lambda: tiny_llama("sdpa"), "llama-eager": lambda: tiny_llama("eager"), "qwen3": tiny_qwen3}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


def max_delta(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("max_batch_tokens", [4, 37, 1024])
def test_batched_and_packed_equal_independent(model, max_batch_tokens):
    rng = random.Random(max_batch_tokens)
    for _ in range(12):
        question = random_question(rng)
        reference = execution.score_independent(model, question).logprobs
        batched = execution.score_batched(model, question, max_batch_tokens).logprobs
        packed = execution.score_packed(model, question, max_batch_tokens).logprobs
        assert max_delta(batched, reference) < TOLERANCE
        assert max_delta(packed, reference) < TOLERANCE


def test_cross_question_packing_equals_one_by_one(model):
    rng = random.Random(7)
    questions = [random_question(rng) for _ in range(15)]
    for max_batch_tokens in (30, 200, 4096):
        together = execution.score_packed_many(model, questions, max_batch_tokens)
        for question, result in zip(questions, together):
            alone = execution.score_independent(model, question).logprobs
            assert max_delta(result.logprobs, alone) < TOLERANCE


def test_large_candidate_sets_run_in_several_groups(model):
    question = random_question(random.Random(3), n_candidates=40)
    reference = execution.score_independent(model, question).logprobs
    for schedule in (execution.score_batched, execution.score_packed):
        scored = schedule(model, question, 16)
        assert scored.work.forward_calls > 2  # prefix + several continuation groups
        assert max_delta(scored.logprobs, reference) < TOLERANCE


def test_single_token_candidates_need_only_the_prefix_call(model):
    question = random_question(random.Random(5))
    question = type(question)(question.prefix, ((3,), (9,), (3,), (42,)))
    for schedule in (execution.score_batched, execution.score_packed):
        scored = schedule(model, question, 1024)
        assert scored.work.forward_calls == 1
        assert scored.work.candidate_tokens == 0
        assert max_delta(scored.logprobs, execution.score_independent(model, question).logprobs) < TOLERANCE


def test_usage_counts_prefix_once_and_fed_tokens():
    model = tiny_llama()
    question = random_question(random.Random(11), n_candidates=5)
    independent = execution.score_independent(model, question).work
    packed = execution.score_packed(model, question, 4096).work
    assert independent.prefix_tokens == len(question.prefix) * len(question.continuations)
    assert independent.forward_calls == len(question.continuations)
    assert packed.prefix_tokens == len(question.prefix)
    assert packed.candidate_tokens == sum(len(c) - 1 for c in question.continuations)
    assert packed.forward_calls == 1


def test_packed_visibility_isolates_candidates():
    call = execution.PackedCall()
    call.add_prefix((1, 2), [5, 6], [0, 1])
    call.add_continuation(2, (5, 7, 8), 0)
    call.add_continuation(2, (6, 9), 1)
    # tokens: p0 p1 | c0:5 c0:7 | c1:6
    expected = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],
    ]
    assert call.allowed().int().tolist() == expected
    continuations = execution.PackedCall()
    continuations.add_continuation(2, (5, 7, 8), 0)
    continuations.add_continuation(2, (6, 9), 1)
    assert continuations.allowed(cached=2).int().tolist() == [row[:2] + row[2:] for row in (
        [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1])]  # the cached prefix is visible to every token


def test_rows_of_different_lengths_share_a_call(model):
    rng = random.Random(13)
    questions = [random_question(rng) for _ in range(6)]
    results = execution.score_packed_many(model, questions, 4096)
    assert [r.work.forward_calls for r in results] == [1] * 6
    for question, result in zip(questions, results):
        assert max_delta(result.logprobs, execution.score_independent(model, question).logprobs) < TOLERANCE
