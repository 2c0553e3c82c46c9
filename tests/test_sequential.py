"""The `sequential` schedule on tiny random hybrid models: equals independent, isolates candidates, fixed state memory."""

import random

import pytest
import torch

from jetgym.scorers import Question, make_scorer, sequential
from jetgym.scorers.execution import score_independent
from jetgym.scorers.models import LoadedModel, architecture_kind
from jetgym.scorers.prompts import EncodedQuestion
from tiny_models import (
    ByteTokenizer,
    random_question,
    tiny_lfm2,
    tiny_llama,
    tiny_mamba2,
    tiny_qwen3_5,
    tiny_qwen3_next,
    tiny_qwen3_sliding,
)

TOLERANCE = 1e-4
HYBRID = {"qwen3_5": tiny_qwen3_5, "qwen3_next": tiny_qwen3_next, "mamba2": tiny_mamba2, "lfm2": tiny_lfm2}
ATTENTION = {"llama": tiny_llama, "qwen3-sliding-window": tiny_qwen3_sliding}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=sorted(HYBRID))
def hybrid(request):
    return HYBRID[request.param]()


def max_delta(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def forward_counter(model):
    """A list that gets one entry per model forward call."""
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("name", sorted(HYBRID) + sorted(ATTENTION))
def test_sequential_equals_independent(name):
    model = {**HYBRID, **ATTENTION}[name]()
    rng = random.Random(sorted(HYBRID | ATTENTION).index(name))
    for _ in range(10):
        question = random_question(rng)
        reference = score_independent(model, question)
        scored = sequential.score_sequential(model, question)
        assert max_delta(scored.logprobs, reference.logprobs) < TOLERANCE
        longer = [c for c in question.continuations if len(c) > 1]
        assert scored.work.forward_calls == 1 + len(longer)
        assert scored.work.prefix_tokens == len(question.prefix)
        assert scored.work.candidate_tokens == sum(len(c) - 1 for c in longer)


def test_hybrid_models_are_detected_as_hybrid(hybrid):
    assert architecture_kind(hybrid.config) == "hybrid"
    assert architecture_kind(tiny_llama().config) == "attention"


def permuted_scores(model, question: EncodedQuestion, seed: int) -> tuple[list[float], list[float]]:
    """Per-candidate scores in the original order and after scoring a shuffled candidate order."""
    order = list(range(len(question.continuations)))
    random.Random(seed).shuffle(order)
    shuffled = EncodedQuestion(question.prefix, tuple(question.continuations[i] for i in order))
    straight = sequential.score_sequential(model, question).logprobs
    back = [0.0] * len(order)
    for position, score in zip(order, sequential.score_sequential(model, shuffled).logprobs):
        back[position] = score
    return straight, back


def test_candidate_order_does_not_change_any_score(hybrid):
    rng = random.Random(21)
    for seed in range(6):
        question = random_question(rng, n_candidates=7)
        straight, back = permuted_scores(hybrid, question, seed)
        assert straight == back  # bit for bit: every candidate starts from the same restored state


def test_two_token_candidates_use_the_in_place_decode_step_and_stay_isolated(hybrid):
    """One fed token takes the single-step kernels that update the working conv/recurrent state in place."""
    rng = random.Random(17)
    question = EncodedQuestion(
        tuple(rng.randrange(50) for _ in range(9)), tuple((rng.randrange(50), rng.randrange(50)) for _ in range(6))
    )
    assert (
        max_delta(sequential.score_sequential(hybrid, question).logprobs, score_independent(hybrid, question).logprobs)
        < TOLERANCE
    )
    straight, back = permuted_scores(hybrid, question, 3)
    assert straight == back


def test_a_leaking_state_is_caught(hybrid, monkeypatch):
    """Without the restore, later candidates continue earlier ones: the order and reference checks both fail."""
    monkeypatch.setattr(sequential, "restore_prefix_state", lambda working, stored: None)
    question = random_question(random.Random(4), n_candidates=6)
    question = EncodedQuestion(question.prefix, tuple(c + (7, 8) for c in question.continuations))  # all multi-token
    straight, back = permuted_scores(hybrid, question, 1)
    assert max_delta(straight, back) > TOLERANCE
    assert max_delta(straight, score_independent(hybrid, question).logprobs) > TOLERANCE


def test_one_stored_and_one_working_state_whatever_the_candidate_count(hybrid, monkeypatch):
    clones = []
    clone = sequential._clone_state
    monkeypatch.setattr(sequential, "_clone_state", lambda stored: clones.append(1) or clone(stored))
    rng = random.Random(8)
    prefix = tuple(rng.randrange(50) for _ in range(12))
    base = tuple(tuple(rng.randrange(50) for _ in range(length)) for length in (1, 3, 9, 5))
    usage = []
    for repeats in (1, 4, 16):
        clones.clear()
        scored = sequential.score_sequential(hybrid, EncodedQuestion(prefix, base * repeats))
        assert len(clones) == 1
        assert scored.work.forward_calls == 1 + 3 * repeats
        usage.append(scored.work.cache_bytes)
    assert usage[0] == usage[1] == usage[2]
    with torch.inference_mode():
        prefix_state = hybrid(input_ids=torch.tensor([prefix]), use_cache=True).cache
    stored = sequential.state_bytes(prefix_state)
    assert stored > 0
    attention = any(getattr(layer, "keys", None) is not None for layer in prefix_state.layers)
    if attention:  # the working state also holds the longest candidate's keys and values
        assert usage[0] > 2 * stored
    else:  # recurrent only: two prefix-sized states, nothing else
        assert usage[0] == 2 * stored


def test_single_token_candidates_take_only_the_prefix_call(hybrid, monkeypatch):
    monkeypatch.setattr(sequential, "_clone_state", lambda stored: pytest.fail("no working state is needed"))
    question = EncodedQuestion((5, 17, 3, 99, 42), ((3,), (9,), (3,), (42,), (100,)))
    calls = forward_counter(hybrid)
    scored = sequential.score_sequential(hybrid, question)
    assert len(calls) == 1
    assert scored.work.forward_calls == 1 and scored.work.candidate_tokens == 0
    assert max_delta(scored.logprobs, score_independent(hybrid, question).logprobs) < TOLERANCE


def test_forward_counter_matches_usage(hybrid):
    question = random_question(random.Random(13), n_candidates=6)
    calls = forward_counter(hybrid)
    scored = sequential.score_sequential(hybrid, question)
    assert len(calls) == scored.work.forward_calls


def test_unsupported_caches_fail_clearly():
    from transformers import StaticCache

    model = tiny_llama()
    with pytest.raises(TypeError, match=r"cannot restore cache layer 0 of type StaticLayer.*schedule='independent'"):
        sequential.check_restorable(StaticCache(config=model.config, max_cache_len=16))
    with pytest.raises(TypeError, match=r"needs a transformers Cache from the prefix call, got tuple"):
        sequential.check_restorable(((torch.zeros(1), torch.zeros(1)),))


# ---------------------------------------------------------------- the jet scorer


def tiny_loaded(model, tokenizer, spec="tiny-hybrid") -> LoadedModel:
    return LoadedModel(spec, model, tokenizer, None, architecture_kind(model.config), 512)


QUESTIONS = [
    Question(context="Which way?", candidates=["left", "right", "go straight ahead", "l", "left"]),
    Question(context="Is it raining?", kind="binary"),
    Question(context="How sure?", candidates=["not at all", "somewhat", "very sure"], kind="ordinal"),
]


def test_jet_scorer_picks_sequential_for_hybrids_and_matches_independent():
    loaded = tiny_loaded(tiny_qwen3_5(), ByteTokenizer())
    auto = make_scorer("jet", model=loaded, template="none")
    assert auto.schedule == "sequential" and auto.describe()["schedule_used"] == "sequential"
    fast = auto.decide_many(QUESTIONS)
    reference = make_scorer("jet", model=loaded, template="none", schedule="independent").decide_many(QUESTIONS)
    for a, b in zip(fast, reference):
        assert max_delta(a.logprobs, b.logprobs) < TOLERANCE
        assert a.usage.cache_bytes > 0 and a.usage.prefix_tokens < b.usage.prefix_tokens
    assert fast[0].logprobs[0] == fast[0].logprobs[4]  # identical texts, identical scores
    attention = make_scorer("jet", model=tiny_loaded(tiny_llama(), ByteTokenizer(), "tiny-llama"), template="none")
    assert attention.schedule == "packed"


@pytest.mark.parametrize("schedule", ["batched", "packed"])
def test_masked_schedules_refuse_hybrids_and_point_to_sequential(schedule):
    jet = make_scorer("jet", model=tiny_loaded(tiny_lfm2(), ByteTokenizer()), template="none", schedule=schedule)
    with pytest.raises(ValueError, match=r"needs an attention-only model.*is hybrid: use schedule='sequential'"):
        jet.decide(QUESTIONS[0])


def test_sequential_is_a_known_schedule_and_typos_are_refused():
    from jetgym.scorers.jet import JetOptions

    assert JetOptions(schedule="sequential").schedule == "sequential"
    with pytest.raises(ValueError, match=r"unknown schedule 'sequentail'; known: .*sequential"):
        JetOptions(schedule="sequentail")


@pytest.mark.slow
def test_jet_scorer_with_a_real_tokenizer_and_chat_template():
    from transformers import AutoTokenizer

    from jetgym.scorers.models import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve("smollm2-135m-instruct"))
    loaded = tiny_loaded(tiny_qwen3_5(vocab_size=tokenizer.vocab_size), tokenizer)
    auto = make_scorer("jet", model=loaded)
    assert auto.schedule == "sequential"
    fast = auto.decide_many(QUESTIONS)
    reference = make_scorer("jet", model=loaded, schedule="independent").decide_many(QUESTIONS)
    for a, b in zip(fast, reference):
        assert max_delta(a.logprobs, b.logprobs) < TOLERANCE
        assert a.choice == b.choice


def test_restore_puts_back_the_cache_length(hybrid):
    """The restored working state reports the prefix's length again (transformers >= 5.25 counts the tokens a
    linear layer saw and reads that count as the cache's length: left unrestored, later candidates shift)."""
    prefix = tuple(range(3, 12))
    with torch.inference_mode():
        stored = hybrid(input_ids=torch.tensor([prefix]), use_cache=True).cache
        working = sequential._clone_state(stored)
        hybrid(input_ids=torch.tensor([[5, 6, 7]]), cache=working, use_cache=True)
        sequential.restore_prefix_state(working, stored)
    assert int(working.get_seq_length()) == int(stored.get_seq_length()) == len(prefix)
