"""Every schedule equals the independent reference (one full forward per candidate) within 1e-4 in fp32."""

import random

import pytest

from jetgym.scorers import execution
from tiny_models import frame_questions, random_question, tiny_llama, tiny_qwen3

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
    from jetgym.scorers.kernels.tree import TreeCall

    call = TreeCall()
    last = call.add_chain((1, 2), -1, 0)
    call.add_candidates(last, 2, [(5, 7, 8), (6, 9)], [0, 1])
    # tokens: p0 p1 | c0:5 c0:7 | c1:6
    expected = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],
    ]
    assert call.visible().int().tolist() == expected
    assert call.visible(start=2).int().tolist() == [
        row[:2] + row[2:] for row in ([1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1])
    ]  # the cached prefix is visible to every token


def test_tree_call_visibility_is_ancestors_or_self():
    """Any forest (chains, forks, several roots, keys not in depth-first order): a key sees exactly its root path."""
    import torch

    from jetgym.scorers.kernels.tree import TreeCall

    rng = random.Random(2)
    call = TreeCall()
    for k in range(60):
        call.add(k, rng.choice([k - 1, k - 1, rng.randrange(k) if k else -1, -1 if k % 25 == 0 else k - 1]), 0)
    ancestor = torch.zeros(60, 60, dtype=torch.bool)
    for k, parent in enumerate(call.parent):
        if parent >= 0:
            ancestor[k] = ancestor[parent]
        ancestor[k, k] = True
    assert torch.equal(call.visible(), ancestor)
    assert torch.equal(call.visible(start=17), ancestor[17:])


def test_rows_of_different_lengths_share_a_call(model):
    rng = random.Random(13)
    questions = [random_question(rng) for _ in range(6)]
    results = execution.score_packed_many(model, questions, 4096)
    assert [r.work.forward_calls for r in results] == [1] * 6
    for question, result in zip(questions, results):
        assert max_delta(result.logprobs, execution.score_independent(model, question).logprobs) < TOLERANCE


# ---------------------------------------------------------------- questions sharing a common prefix


def mixed_questions(rng):
    """A frame of five (one whole-prefix member), an unrelated question, a frame of three, one more alone."""
    return (
        frame_questions(rng, 20, [4, 0, 7, 2, 5])
        + [random_question(rng)]
        + frame_questions(rng, 12, [3, 6, 1], first_token=50)
        + [random_question(rng)]
    )


def test_shared_prefix_groups():
    from jetgym.scorers.kernels.packing import shared_prefix_groups

    s, t = tuple(range(10)), tuple(range(20, 32))
    prefixes = [s + (90, 1), s + (91,), s, (60, 61, 62), t + (1,), t + (2,)]
    assert shared_prefix_groups(prefixes, 8) == [([0, 1, 2], 10), ([3], 3), ([4, 5], 12)]
    assert shared_prefix_groups(prefixes, 0) == [([i], len(p)) for i, p in enumerate(prefixes)]
    assert shared_prefix_groups(prefixes, 11) == [([0], 12), ([1], 11), ([2], 10), ([3], 3), ([4, 5], 12)]
    no_images = [True, False, True, True, True, True]  # a question with images shares with no one
    assert shared_prefix_groups(prefixes, 8, no_images) == [([0], 12), ([1], 11), ([2], 10), ([3], 3), ([4, 5], 12)]
    x = s + (70,) * 6
    # joining may shrink the common part, but not the tokens saved: 16 x 2 -> 10 x 3 joins, 16 x 3 -> 10 x 4 does not
    assert shared_prefix_groups([x + (1,), x + (2,), s + (3,)], 8) == [([0, 1, 2], 10)]
    assert shared_prefix_groups([x + (1,), x + (2,), x + (4,), s + (3,)], 8) == [([0, 1, 2], 16), ([3], 11)]


@pytest.mark.parametrize("max_batch_tokens", [40, 100, 4096])
def test_shared_prefix_rows_equal_independent(model, max_batch_tokens):
    """Common prefix once, then each question's tail and candidates: every score equals the independent path,
    whether members are too large and take the cache path (40), frames are split over rows (100) or each
    frame fits one row (4096)."""
    questions = mixed_questions(random.Random(max_batch_tokens))
    shared = execution.score_packed_many(model, questions, max_batch_tokens, min_shared=8)
    for question, result in zip(questions, shared):
        assert max_delta(result.logprobs, execution.score_independent(model, question).logprobs) < TOLERANCE
    if max_batch_tokens == 4096:  # both frames shared their common part: 20 and 12 tokens counted once
        separate = sum(len(q.prefix) for q in questions)
        assert sum(r.work.prefix_tokens for r in shared) == separate - 4 * 20 - 2 * 12


def test_shared_prefix_counts_tokens_once_and_runs_one_call():
    model = tiny_llama()
    calls, fed = [], []

    def count(module, args, kwargs, out):
        calls.append(1)
        fed.append(kwargs["input_ids"].numel())

    model.register_forward_hook(count, with_kwargs=True)
    questions = frame_questions(random.Random(21), 30, [5, 3, 0, 8, 2, 6, 4, 7])
    tails = sum(len(q.prefix) - 30 for q in questions)
    candidates = sum(execution.fed_tokens(q) for q in questions)
    shared = execution.score_packed_many(model, questions, 4096, min_shared=16)
    assert len(calls) == 1 and fed == [30 + tails + candidates]  # one row: common part, tails, candidates
    assert sum(r.work.prefix_tokens for r in shared) == 30 + tails
    assert [r.work.prefix_tokens - (len(q.prefix) - 30) for q, r in zip(questions, shared)] == [4] * 6 + [3] * 2
    assert all(
        r.work.forward_calls == 1 and r.work.candidate_tokens == execution.fed_tokens(q)
        for q, r in zip(questions, shared)
    )
    calls.clear()
    separate = execution.score_packed_many(model, questions, 4096)  # min_shared=0: every question its own row
    assert sum(r.work.prefix_tokens for r in separate) == sum(len(q.prefix) for q in questions) == 8 * 30 + tails
    for a, b in zip(shared, separate):
        assert max_delta(a.logprobs, b.logprobs) < TOLERANCE


def test_jet_scorer_shares_a_frame_context():
    """Through `decide_many`: LIBERO-like questions (one long context, their own question line) score as
    with the independent schedule; the context's tokens are counted once."""
    from jetgym.scorers import Question, make_scorer
    from jetgym.scorers.models import LoadedModel
    from tiny_models import ByteTokenizer

    loaded = LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)
    context = (
        "You see a robot arm at a table. Front camera: mostly gray 60%, white 20%. Instruction: put the bowl away.\n"
    )
    asks = ["Is the gripper closed?", "Which way does it move?", "Is the task done?", ""]
    questions = [Question(context=context + ask, candidates=[" no", " yes", " cannot tell"]) for ask in asks]
    questions.append(Question(context="Something else entirely", candidates=[" a", " b"]))
    reference = make_scorer("jet", model=loaded, template="none", schedule="independent").decide_many(questions)
    usage = {}
    for min_shared in (0, 32):
        decisions = make_scorer("jet", model=loaded, template="none", min_shared_prefix=min_shared).decide_many(
            questions
        )
        for mine, ref in zip(decisions, reference):
            assert max_delta(mine.logprobs, ref.logprobs) < TOLERANCE and mine.choice == ref.choice
        usage[min_shared] = sum(d.usage.prefix_tokens for d in decisions)
    common = len(context.encode())  # ByteTokenizer: one token per byte; the asks differ at their first byte
    assert usage[0] - usage[32] == 3 * common
