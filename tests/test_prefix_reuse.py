"""A prefix kept across calls (`jet`'s `reuse_prefix`): every score equals the independent reference in fp32,
later calls run fewer prefix tokens, the kept keys are never changed by a call, and stale keys are never read."""

import random

import pytest
import torch

from jetgym.scorers import execution
from jetgym.scorers.kernels.kept_prefix import KeptPrefix
from jetgym.scorers.prompts import EncodedQuestion
from tiny_models import VOCAB, frame_questions, random_question, tiny_llama, tiny_qwen3, tiny_qwen3_sliding

MODELS = {"llama-sdpa": lambda: tiny_llama("sdpa"), "llama-eager": lambda: tiny_llama("eager"), "qwen3": tiny_qwen3}


def tolerance(question):
    """docs/design.md, "Equivalence tolerance": 1e-4 + 1e-5 per candidate token."""
    return 1e-4 + 1e-5 * max(len(c) for c in question.continuations)


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


def tokens(rng, n):
    return tuple(rng.randrange(VOCAB) for _ in range(n))


def control_loop(rng):
    """(prefix, kept tokens it reads) per call: one fixed part with varying tails, then another fixed part, a
    prefix diverging inside the kept one, one shorter than the kept one, one too short to read or keep."""
    fixed, other = tokens(rng, 60), tokens(rng, 50)
    inside = (other[45] + 1) % VOCAB
    return [
        (fixed + (1,) + tokens(rng, 7), 0),
        (fixed + (2,) + tokens(rng, 9), 60),
        (fixed + (3,) + tokens(rng, 4), 60),
        (other + (9,) + tokens(rng, 5), 0),
        (other + (5, 6), 50),
        (other[:45] + (inside,) + tokens(rng, 3), 45),
        (other[:40], 39),
        (other[:20], 0),
        (other[:20] + (1, 2), 0),
    ]


@pytest.mark.parametrize("max_batch_tokens", [12, 4096])
def test_reuse_over_a_control_loop_equals_independent(model, max_batch_tokens):
    """One question per call, as an agent sends them (12: each question too large for one call, so its prefix
    continues the kept keys in a prefix call; 4096: one packed row over them)."""
    rng = random.Random(max_batch_tokens)
    kept = KeptPrefix()
    for step, (prefix, reads) in enumerate(control_loop(rng)):
        question = EncodedQuestion(prefix, random_question(rng).continuations)
        [scored] = execution.score_packed_many(model, [question], max_batch_tokens, 32, kept)
        reference = execution.score_independent(model, question).logprobs
        assert max(abs(a - b) for a, b in zip(scored.logprobs, reference)) < tolerance(question), step
        assert scored.work.reused_tokens == reads, step
        assert scored.work.prefix_tokens == len(prefix) - reads, step
        if len(prefix) > 32:  # kept for the next call
            assert kept.tokens == prefix and scored.work.cache_bytes == kept.nbytes > 0
        else:  # too short for any later call to read 32 of its tokens: nothing kept
            assert len(kept) == 0


def test_reuse_with_several_questions_per_call(model):
    """A kept frame context read by a call of several questions (sharing their tails' common part within the
    call too), next to questions that do not begin with it and a prior-like question kept out of the store."""
    rng = random.Random(3)
    frame = frame_questions(rng, 40, [6, 3, 9, 5])
    kept = KeptPrefix()
    execution.score_packed_many(model, frame[:1], 4096, 16, kept)
    assert len(kept) == len(frame[0].prefix)
    states = list(kept.layers)
    followers = [
        EncodedQuestion(frame[0].prefix[:40] + tokens(rng, 12), random_question(rng).continuations),
        *frame[1:],
        EncodedQuestion(tokens(rng, 30), random_question(rng).continuations),
        EncodedQuestion(tokens(rng, 20), ((4, 5), (6,))),
    ]
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    for max_batch_tokens in (60, 4096):  # 60: the readers need several rows and calls
        kept.keep(model, frame[0].prefix, states)
        calls.clear()
        results = execution.score_packed_many(model, followers, max_batch_tokens, 16, kept, keep=len(followers) - 2)
        assert len(calls) > 1 if max_batch_tokens == 60 else calls == [1]  # readers and the others in one call
        for question, scored in zip(followers, results):
            reference = execution.score_independent(model, question).logprobs
            assert max(abs(a - b) for a, b in zip(scored.logprobs, reference)) < tolerance(question)
        assert sum(r.work.reused_tokens for r in results) == 40
        assert [r.work.reused_tokens > 0 for r in results] == [True] * 4 + [False] * 2
        assert kept.tokens == followers[-2].prefix  # the question named by `keep`, not the last (a prior)
    hook.remove()


def snapshot(kept):
    return [(k.clone(), v.clone()) for k, v in kept.layers]


def test_calls_never_change_the_kept_keys(model):
    rng = random.Random(4)
    fixed = tokens(rng, 50)
    kept = KeptPrefix()
    execution.score_packed_many(model, [EncodedQuestion(fixed + (1, 2), ((3, 4, 5), (6,)))], 4096, 32, kept)
    held, copies = list(kept.layers), snapshot(kept)
    for max_batch_tokens in (4096, 8):  # a packed row, and a prefix call continuing the keys
        kept.keep(model, fixed + (1, 2), held)
        question = EncodedQuestion(fixed + (7, 8, 9), random_question(rng).continuations)
        [scored] = execution.score_packed_many(model, [question], max_batch_tokens, 32, kept)
        assert scored.work.reused_tokens == 50
        for (k, v), (k0, v0) in zip(held, copies):
            assert torch.equal(k, k0) and torch.equal(v, v0)


def test_second_call_runs_fewer_tokens():
    """Counted at the model: the second call feeds only the tail and the candidates."""
    model = tiny_llama()
    fed = []
    model.register_forward_hook(
        lambda module, args, kwargs, out: fed.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    rng = random.Random(5)
    fixed = tokens(rng, 100)
    questions = [EncodedQuestion(fixed + (k,) + tokens(rng, 9), ((1, 2, 3), (4, 5), (6,))) for k in range(3)]
    kept = KeptPrefix()
    for question in questions:
        execution.score_packed_many(model, [question], 4096, 32, kept)
    candidates = execution.fed_tokens(questions[0])
    assert fed == [110 + candidates, 10 + candidates, 10 + candidates]


def test_stale_or_unsupported_kept_prefixes_are_never_read():
    rng = random.Random(6)
    question = EncodedQuestion(tokens(rng, 50), ((1, 2), (3,)))
    again = EncodedQuestion(question.prefix + (9,), ((1, 2), (3,)))
    llama, qwen = tiny_llama(), tiny_qwen3()
    kept = KeptPrefix()
    execution.score_packed_many(llama, [question], 4096, 32, kept)
    states = list(kept.layers)
    [scored] = execution.score_packed_many(qwen, [again], 4096, 32, kept)  # another model: same tokens, other keys
    assert scored.work.reused_tokens == 0
    assert max(abs(a - b) for a, b in zip(scored.logprobs, execution.score_independent(qwen, again).logprobs)) < 1e-4
    kept.keep(llama, question.prefix, states)
    llama.double()  # the same model object in another dtype: its float32 keys are stale
    [scored] = execution.score_packed_many(llama, [again], 4096, 32, kept)
    assert scored.work.reused_tokens == 0 and kept.layers[0][0].dtype == torch.float64
    assert max(abs(a - b) for a, b in zip(scored.logprobs, execution.score_independent(llama, again).logprobs)) < 1e-4
    sliding = tiny_qwen3_sliding()  # a sliding-window layer: nothing is kept
    execution.score_packed_many(sliding, [question], 4096, 32, kept)
    assert len(kept) == 0 and not kept.usable(sliding)
    execution.score_packed_many(llama, [question], 4096, 0, kept)  # min_shared 0: no sharing at all
    assert len(kept) == 0


def test_reusable_picks_the_length_that_saves_most():
    kept = KeptPrefix()
    kept.tokens = tuple(range(100))
    prefixes = [
        tuple(range(80)) + (1,),
        tuple(range(40)) + (7,),
        tuple(range(40)) + (8,),
        None,
        tuple(range(30)),
        tuple(range(41)),
    ]
    # 80 x 1 < 40 x 4 (the second, third and sixth read 40; the sixth could read its first 40 too)
    assert kept.reusable(prefixes, 32) == (40, [0, 1, 2, 5])
    assert kept.reusable(prefixes[:1] + prefixes[3:5], 32) == (80, [0])
    assert kept.reusable(prefixes[4:5], 32) == (0, [])  # 29 readable < 32
    assert kept.reusable(prefixes, 0) == (0, [])
    with pytest.raises(ValueError, match="kept states must be batch 1 with 3 keys per layer"):
        kept.keep(tiny_llama(), (1, 2, 3), [(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8))])


# ---------------------------------------------------------------- through the scorer


def loaded_tiny():
    from jetgym.scorers.models import LoadedModel
    from tiny_models import ByteTokenizer

    return LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)


FIXED = (
    "You control a marine in a corridor. Examples: a demon ahead -> attack; a wall ahead -> turn left; "
    "an open door -> move forward.\n"
)
STEPS = ["Now: a demon ahead, health 80.", "Now: a wall ahead.", "Now: an open door, ammo 3.", "Now: nothing."]
CONTROLS = [" attack", " turn left", " turn right", " move forward", " move backward", " use", " no-op"]


def steps_then_other():
    from jetgym.scorers import Question

    questions = [Question(context=FIXED + step, candidates=CONTROLS) for step in STEPS]
    questions.append(Question(context=FIXED[:70] + "diverging here", candidates=CONTROLS))  # inside the kept prefix
    questions.append(Question(context=FIXED[:60], candidates=CONTROLS))  # shorter than the kept prefix
    questions.append(Question(context="A different task: pick a colour.", candidates=[" red", " blue"]))
    questions.append(questions[0])
    return questions


@pytest.mark.parametrize("normalization", ["none", "pmi", "contextual"])
def test_scorer_decide_loop_equals_independent_and_reuse_off(normalization):
    """Sequential `decide` calls: equal to the independent schedule, to `reuse_prefix=False`, and to one
    `decide_many`; the candidate priors of pmi/contextual run through the same packed schedule."""
    from jetgym.scorers import make_scorer
    from jetgym.scorers.kernels.packing import common_length
    from tiny_models import ByteTokenizer

    loaded, questions = loaded_tiny(), steps_then_other()
    options = {"model": loaded, "template": "none", "normalization": normalization}
    reference = make_scorer("jet", schedule="independent", **options).decide_many(questions)
    reuse, plain = make_scorer("jet", **options), make_scorer("jet", reuse_prefix=False, **options)
    looped = [reuse.decide(q) for q in questions]
    looped_reads = reuse.kept_prefix.reused_tokens
    unshared = [plain.decide(q) for q in questions]
    many = make_scorer("jet", **options).decide_many(questions)
    again = reuse.decide_many(questions)  # several questions of one call read what the loop kept
    for decisions in (looped, unshared, many, again):
        for mine, ref in zip(decisions, reference):
            assert max(abs(a - b) for a, b in zip(mine.logprobs, ref.logprobs)) < 1e-4
            assert max(abs(a - b) for a, b in zip(mine.probs, ref.probs)) < 1e-4 and mine.choice == ref.choice
            if normalization != "none":
                assert max(abs(a - b) for a, b in zip(mine.prior_logprobs, ref.prior_logprobs)) < 1e-4
    computed = [d.usage.prefix_tokens for d in looped]
    full = [d.usage.prefix_tokens for d in unshared]
    ids = [ByteTokenizer()(q.context)["input_ids"] for q in questions]
    assert full == [len(p) for p in ids]
    read = [0] + [min(common_length(a, b), len(b) - 1) for a, b in zip(ids, ids[1:])]
    read = [n if n >= 32 else 0 for n in read]
    assert read[1] > len(FIXED) and read[4:] == [70, 59, 0, 0]  # shorter: all but its last token
    assert [f - c for c, f in zip(computed, full)] == read
    assert looped_reads == sum(read) and plain.kept_prefix is None
    # the second pass as one call reads the prefix the loop kept (the first question's, repeated last)
    assert reuse.kept_prefix.reused_tokens > looped_reads
    assert sum(d.usage.prefix_tokens for d in again) < sum(d.usage.prefix_tokens for d in many)


def test_reuse_prefix_option_is_validated():
    from jetgym.scorers.jet import JetOptions

    assert JetOptions().reuse_prefix is True
    with pytest.raises(ValueError, match="reuse_prefix must be true or false, got 'yes'"):
        JetOptions(reuse_prefix="yes")
