"""The `jet` scorer on the embedded model: behaviour, bad inputs, schedules against the reference."""

import pytest

from jetgym.scorers import Question, make_scorer
from jetgym.scorers.models import ModelNotFoundError, architecture_kind, load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded():
    return load_model("smollm2-135m-instruct")


def scorer(embedded, **options):
    return make_scorer("jet", model=embedded, **options)


def test_embedded_model_ranks_paris_far_above_banana(embedded):
    d = scorer(embedded, template="none").decide(
        Question(context="The capital of France is", candidates=[" Paris", " Banana"])
    )
    assert d.choice == 0
    assert d.logprobs[0] - d.logprobs[1] > 10
    assert d.probs[0] > 0.999 and sum(d.probs) == pytest.approx(1.0)


def test_embedded_model_is_attention_only_with_a_chat_template(embedded):
    assert embedded.kind == "attention"
    assert embedded.tokenizer.chat_template


def test_chat_template_binary_and_ordinal(embedded):
    jet = scorer(embedded)
    d = jet.decide(Question(context="Is water wet? Answer Yes or No.", kind="binary"))
    assert d.candidates == ("No", "Yes") and 0 < d.p_true < 1
    d = jet.decide(Question(context="Rate it", candidates=["low", "medium", "high"], kind="ordinal"))
    assert 0 <= d.expected_index <= 2
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"}]
    assert jet.decide(Question(context=messages, candidates=["Paris", "Banana"])).text == "Paris"


def test_identical_texts_get_identical_scores(embedded):
    d = scorer(embedded).decide(Question(context="Pick a fruit", candidates=["apple", "pear", "apple"]))
    assert d.logprobs[0] == d.logprobs[2]


@pytest.mark.parametrize("schedule", ["batched", "packed", "auto"])
def test_schedules_equal_independent_on_the_embedded_model(embedded, schedule):
    questions = [
        Question(context="The capital of France is", candidates=[" Paris", " the city of Lyon", " Banana"]),
        Question(context="Which is a colour?", candidates=["red", "a very long answer about nothing", "red car"]),
        Question(context="Is ice cold?", kind="binary"),
    ]
    reference = scorer(embedded, schedule="independent").decide_many(questions)
    fast = scorer(embedded, schedule=schedule).decide_many(questions)
    for a, b in zip(fast, reference):
        assert a.choice == b.choice
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_context_longer_than_the_window_is_refused(embedded):
    long = "word " * (embedded.window + 10)
    with pytest.raises(ValueError, match=r"exceeds the model window of 8192 tokens; the context is never truncated"):
        scorer(embedded, template="none").decide(Question(context=long, candidates=[" a"]))


def test_template_none_refuses_chat_messages(embedded):
    with pytest.raises(ValueError, match="template='none' needs the context as one string"):
        scorer(embedded, template="none").decide(Question(context=[{"role": "user", "content": "x"}], candidates=["a"]))


def test_text_only_model_refuses_images(embedded):
    with pytest.raises(ValueError, match="cannot score images"):
        scorer(embedded).decide(Question(context="What is shown?", candidates=["a"], images=["frame.png"]))


def test_unknown_model_spec_is_refused_with_a_suggestion():
    with pytest.raises(
        ModelNotFoundError, match=r"unknown model spec 'smollm2-135m'.*Did you mean 'smollm2-135m-instruct'"
    ):
        load_model("smollm2-135m")


def test_unreachable_hub_id_names_the_spec_and_the_fix():
    with pytest.raises(
        ModelNotFoundError, match=r"cannot load model 'nobody/no-such-model'.*model=/path/to/a/local/folder"
    ):
        load_model("nobody/no-such-model")


def test_architecture_kind_from_config():
    from transformers import LlamaConfig, Qwen3_5TextConfig

    assert architecture_kind(LlamaConfig()) == "attention"
    hybrid = Qwen3_5TextConfig(
        num_hidden_layers=4, layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    )
    assert architecture_kind(hybrid) == "hybrid"


def test_schedules_agree_on_20_mmlu_questions(embedded):
    from jetgym.questions.sets import load_mmlu

    questions = load_mmlu(subset="per_subject_5", limit=20)
    reference = scorer(embedded, template="none", schedule="independent").decide_many(questions)
    for schedule in ("batched", "packed"):
        decisions = scorer(embedded, template="none", schedule=schedule, max_batch_tokens=400).decide_many(questions)
        delta = max(abs(x - y) for d, r in zip(decisions, reference) for x, y in zip(d.logprobs, r.logprobs))
        print(f"{schedule}: max |delta logprob| vs independent over 20 MMLU questions = {delta:.2e}")
        assert [d.choice for d in decisions] == [r.choice for r in reference]
        assert delta < 1e-4


def test_reasoning_trace_joins_the_shared_context(embedded):
    question = Question(
        context="Which is heavier, a kilogram of iron or a gram of feathers?",
        candidates=["the iron", "the feathers"],
        id="r1",
    )
    options = dict(reasoning=True, reasoning_tokens=12)
    first = scorer(embedded, **options).decide(question)
    again = scorer(embedded, schedule="independent", **options).decide(question)
    plain = scorer(embedded).decide(question)
    assert first.trace and first.trace == again.trace
    assert first.to_dict()["trace"] == first.trace and "trace" not in plain.to_dict()
    assert first.usage.prefix_tokens > plain.usage.prefix_tokens
    assert max(abs(a - b) for a, b in zip(first.logprobs, again.logprobs)) < 1e-4
    with pytest.raises(ValueError, match="reasoning_tokens must be at least 1"):
        scorer(embedded, reasoning=True, reasoning_tokens=0)


def test_prefix_reuse_on_the_embedded_model(embedded):
    """An agent's loop: a fixed chat (system message + worked examples) and a new observation per step. The
    steps after the first read the fixed part from the kept prefix; every score equals the independent path."""
    fixed = [{"role": "system", "content": "You play Doom. Pick one control."}]
    for seen, done in [("a demon ahead", "attack"), ("a wall ahead", "turn left"), ("an open door", "move forward")]:
        fixed += [{"role": "user", "content": f"You see {seen}."}, {"role": "assistant", "content": done}]
    controls = ["attack", "turn left", "turn right", "move forward", "use"]
    steps = [
        Question(context=fixed + [{"role": "user", "content": f"You see {seen}."}], candidates=controls)
        for seen in ("two imps", "a corridor to the left", "a barrel")
    ]
    reuse, reference = scorer(embedded), scorer(embedded, schedule="independent")
    decisions = [reuse.decide(q) for q in steps]
    for mine, ref in zip(decisions, reference.decide_many(steps)):
        assert max(abs(a - b) for a, b in zip(mine.logprobs, ref.logprobs)) < 1e-4 and mine.choice == ref.choice
    full = [d.usage.prefix_tokens for d in scorer(embedded, reuse_prefix=False).decide_many(steps[:1])]
    assert decisions[0].usage.prefix_tokens == full[0]
    assert all(d.usage.prefix_tokens < full[0] // 2 for d in decisions[1:])
    assert reuse.kept_prefix.reusing_calls == 2
