"""Candidate-prior corrections (`normalization=`): hand computations on a tiny model, prior caching, agreement
of the schedules and of `decide`/`decide_many`, and the raw log-likelihoods left untouched."""

import math

import pytest

from jetgym.scorers import Question, make_scorer
from jetgym.scorers.execution import score_independent
from jetgym.scorers.models import LoadedModel
from jetgym.scorers.prompts import encode
from tiny_models import ByteTokenizer, tiny_llama

TOLERANCE = 1e-4
QUESTIONS = [
    Question(context="Which way now?", candidates=["left", "right", "go straight ahead", "left"], id="a", gold=1),
    Question(context="Is it raining?", candidates=["No", "Yes"], kind="binary", id="b", gold=0),
    Question(context="How sure are you?", candidates=["not at all", "somewhat", "very sure"], kind="ordinal", id="c"),
]


@pytest.fixture(scope="module")
def loaded():
    return LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)


def jet(loaded, **options):
    return make_scorer("jet", model=loaded, template="none", **options)


def hand_logprobs(loaded, context, texts):
    """Reference log-likelihoods: one plain forward per candidate."""
    return score_independent(loaded.model, encode(loaded.tokenizer, context, texts, "none", 512)).logprobs


def softmax(values):
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("normalization", ["none", "token", "byte", "contextual", "pmi"])
def test_each_normalization_matches_a_hand_computation(loaded, normalization):
    question = QUESTIONS[0]
    texts = list(question.candidates)
    raw = hand_logprobs(loaded, question.context, texts)
    if normalization == "token":  # ByteTokenizer: one token per byte
        expected = [lp / len(t.encode()) for lp, t in zip(raw, texts)]
    elif normalization == "byte":
        expected = [lp / len(t.encode("utf-8")) for lp, t in zip(raw, texts)]
    elif normalization in ("contextual", "pmi"):
        premise = {"contextual": "N/A", "pmi": "Answer:"}[normalization]
        prior = hand_logprobs(loaded, premise, texts)
        expected = [lp - p for lp, p in zip(raw, prior)]
    else:
        expected = raw
    for schedule in ("independent", "batched", "packed", "sequential"):
        d = jet(loaded, normalization=normalization, schedule=schedule).decide(question)
        assert max(abs(a - b) for a, b in zip(d.logprobs, raw)) < TOLERANCE  # raw values unchanged
        assert max(abs(a - b) for a, b in zip(d.corrected, expected)) < TOLERANCE
        assert d.probs == pytest.approx(softmax(expected), abs=1e-5)
        assert d.normalization == normalization
        assert d.corrected[0] == d.corrected[3]  # identical texts, identical scores


def test_token_and_byte_differ_when_tokens_are_not_bytes(loaded):
    """A tokenizer with one id per character of a multi-byte text: token counts and byte counts differ."""

    class CharTokenizer(ByteTokenizer):
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(ch) % 101 for ch in text]}

    chars = LoadedModel("tiny-llama", loaded.model, CharTokenizer(), None, "attention", 512)
    question = Question(context="Où?", candidates=["été", "ici"])
    raw = jet(chars).decide(question).logprobs
    token = jet(chars, normalization="token").decide(question).corrected
    byte = jet(chars, normalization="byte").decide(question).corrected
    assert token == pytest.approx([raw[0] / 3, raw[1] / 3])
    assert byte == pytest.approx([raw[0] / 5, raw[1] / 3])  # "été" is 5 UTF-8 bytes


def test_custom_neutral_premise(loaded):
    question = QUESTIONS[0]
    texts = list(question.candidates)
    prior = hand_logprobs(loaded, "Question: N/A\nAnswer:", texts)
    d = jet(loaded, normalization="contextual", neutral_premise="Question: N/A\nAnswer:").decide(question)
    assert d.prior_logprobs == pytest.approx(prior, abs=TOLERANCE)


def forward_counter(model):
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("backend", ["jet", "fastjev"])
def test_prior_of_a_fixed_candidate_set_is_computed_once(loaded, backend):
    controls = ("move forward", "turn left", "turn right", "attack")
    scorer = make_scorer(backend, model=loaded, template="none", normalization="pmi")
    calls, handle = forward_counter(loaded.model)
    try:
        first = scorer.decide(Question(context="Step 1: an enemy ahead.", candidates=controls))
        after_first = len(calls)
        assert first.prior_usage is not None and first.prior_usage.forward_calls >= 1
        assert scorer.corrections.cache.computed == len(controls)
        later = [scorer.decide(Question(context=f"Step {i}: nothing.", candidates=controls)) for i in range(2, 6)]
        assert scorer.corrections.cache.computed == len(controls)  # never again
        assert all(d.prior_usage is None for d in later)
        assert len(calls) - after_first == sum(d.usage.forward_calls for d in later)  # no prior calls
        assert all(d.prior_logprobs == first.prior_logprobs for d in later)
        # a new text costs only its own prior, computed once
        more = scorer.decide(Question(context="Step 6.", candidates=controls + ("use",)))
        assert scorer.corrections.cache.computed == len(controls) + 1 and more.prior_usage is not None
    finally:
        handle.remove()


@pytest.mark.parametrize("normalization", ["token", "byte", "contextual", "pmi"])
@pytest.mark.parametrize(
    "backend, schedule",
    [("jet", "packed"), ("jet", "batched"), ("jet", "sequential"), ("fastjev", "auto"), ("fastjev", "segmented")],
)
def test_decide_and_decide_many_agree_with_the_reference_path(loaded, normalization, backend, schedule):
    reference = jet(loaded, normalization=normalization, schedule="independent").decide_many(QUESTIONS)
    many = make_scorer(
        backend, model=loaded, template="none", normalization=normalization, schedule=schedule
    ).decide_many(QUESTIONS)
    one_scorer = make_scorer(backend, model=loaded, template="none", normalization=normalization, schedule=schedule)
    singles = [one_scorer.decide(q) for q in QUESTIONS]
    for ref, a, b in zip(reference, many, singles):
        for d in (a, b):
            assert max(abs(x - y) for x, y in zip(d.logprobs, ref.logprobs)) < TOLERANCE
            assert max(abs(x - y) for x, y in zip(d.corrected, ref.corrected)) < TOLERANCE
            assert d.choice == ref.choice and d.normalization == normalization


def test_default_changes_nothing(loaded):
    plain = jet(loaded).decide_many(QUESTIONS)
    for d in plain:
        assert d.scores is None and d.corrected == d.logprobs and d.prior_logprobs is None
        row = d.to_dict()
        assert not {"scores", "normalization", "temperature", "prior_logprobs", "prior_usage"} & set(row)
        assert d.probs == pytest.approx(softmax(d.logprobs))
    assert jet(loaded).corrections.premise is None


def test_temperature_rescales_probabilities_never_the_choice(loaded):
    plain = jet(loaded, normalization="pmi").decide(QUESTIONS[0])
    hot = jet(loaded, normalization="pmi", temperature=3.0).decide(QUESTIONS[0])
    assert hot.choice == plain.choice and hot.logprobs == plain.logprobs and hot.corrected == plain.corrected
    assert hot.probs == pytest.approx(softmax([s / 3.0 for s in plain.corrected]))
    row = hot.to_dict()
    assert row["temperature"] == 3.0 and row["normalization"] == "pmi" and len(row["prior_logprobs"]) == 4
    assert row["gold_nll"] == pytest.approx(-math.log(hot.probs[1]))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(normalization="length"), "unknown normalization 'length'; known: none, token, byte, contextual, pmi"),
        (dict(normalization="pmi", neutral_premise="  "), "neutral_premise must be a non-empty text"),
        (dict(temperature=0), "temperature must be a finite number > 0, got 0"),
        (dict(temperature=float("inf")), "temperature must be a finite number > 0"),
        (dict(temperature="2"), "temperature must be a finite number > 0, got '2'"),
    ],
)
def test_bad_options_are_refused_before_a_model_loads(options, message):
    from jetgym.scorers.fastjev import FastJevOptions
    from jetgym.scorers.jet import JetOptions

    for cls in (JetOptions, FastJevOptions):
        with pytest.raises(ValueError, match=message):
            cls(**options)
