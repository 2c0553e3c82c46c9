"""The decision rules of the scoring contract (docs/design.md), on hand-made log-likelihoods."""

import math

import pytest

from jetgym.scorers import Question, Usage
from jetgym.scorers.decision import make_decision


def decide(question, logprobs):
    return make_decision(question, question.candidates, logprobs, Usage())


def test_paper_example_normalizes_likelihoods_over_candidates():
    d = decide(Question(context="x", candidates=["a", "b"]), [math.log(0.06), math.log(0.02)])
    assert d.probs == pytest.approx((0.75, 0.25))
    assert d.choice == 0 and d.label == "0" and d.text == "a"


def test_ties_go_to_the_earliest_candidate():
    d = decide(Question(context="x", candidates=["a", "b", "c"]), [-2.0, -1.0, -1.0])
    assert d.choice == 1
    d = decide(Question(context="x", candidates=["a", "b"], labels=["Y", "X"]), [-1.0, -1.0])
    assert d.label == "Y"


def test_binary_returns_probability_of_true():
    d = decide(Question(context="x", candidates=["No", "Yes"], kind="binary"), [math.log(0.1), math.log(0.3)])
    assert d.p_true == pytest.approx(0.75)
    with pytest.raises(AttributeError, match="expected_index is defined for ordinal questions"):
        d.expected_index


def test_ordinal_returns_expected_index():
    d = decide(
        Question(context="x", candidates=["low", "mid", "high"], kind="ordinal"), [math.log(v) for v in (1, 1, 2)]
    )
    assert d.expected_index == pytest.approx(0 * 0.25 + 1 * 0.25 + 2 * 0.5)
    with pytest.raises(AttributeError, match="p_true is defined for binary questions"):
        d.p_true


def test_gold_nll_sums_every_label_with_the_gold_text():
    q = Question(context="x", candidates=["Paris", "Lyon", "Paris"], labels=["A", "B", "C"], gold="C")
    d = decide(q, [math.log(0.2), math.log(0.6), math.log(0.2)])
    assert d.gold_nll == pytest.approx(-math.log(0.4))
    assert d.correct is False
    d = decide(q, [math.log(0.4), math.log(0.2), math.log(0.4)])
    assert d.choice == 0 and d.correct is True  # label A has the gold text


def test_response_object_has_sorted_fields():
    q = Question(context="x", candidates=["a", "b"], labels=["A", "B"], gold="B", id="q1")
    row = decide(q, [-1.0, -2.0]).to_dict()
    assert row["choice"] == "A" and row["gold"] == "B" and row["correct"] is False and row["id"] == "q1"
    assert set(row) >= {"id", "probs", "logprobs", "choice", "gold", "correct", "usage"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(context="x", candidates=[]), "candidate list is empty"),
        (dict(context="x"), "a categorical question needs candidates"),
        (dict(context="x", candidates=["a", ""]), "every candidate must be a non-empty string"),
        (dict(context="x", candidates=["Yes", "Yes"], kind="binary"), "binary candidate texts must be distinct"),
        (dict(context="x", candidates=["a", "b", "c"], kind="binary"), "exactly 2 candidates"),
        (dict(context="x", candidates=["only"], kind="ordinal"), "at least 2 levels"),
        (dict(context="x", candidates=["a", "a"], kind="ordinal"), "ordinal candidate texts must be distinct"),
        (dict(context="x", candidates=["a"], kind="multi"), "unknown question kind 'multi'"),
        (dict(context="", candidates=["a"]), "question context is empty"),
        (dict(context=[{"role": "user"}], candidates=["a"]), r"chat message 0 .*lacks 'content'"),
        (dict(context="x", candidates=["a", "b"], labels=["A"]), "labels must match the candidates"),
        (dict(context="x", candidates=["a", "b"], labels=["A", "A"]), "labels must be distinct"),
    ],
)
def test_bad_questions_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Question(**kwargs)


def test_unknown_gold_is_refused():
    with pytest.raises(ValueError, match="gold 'Z' is not one of the labels"):
        decide(Question(context="x", candidates=["a", "b"], labels=["A", "B"], gold="Z"), [-1.0, -1.0])
    with pytest.raises(ValueError, match="gold index 5 is out of range"):
        decide(Question(context="x", candidates=["a", "b"], gold=5), [-1.0, -1.0])


def test_gold_nll_is_finite_when_the_gold_probability_underflows():
    q = Question(context="x", candidates=["a", "b", "a"], labels=["A", "B", "C"], gold="A")
    d = decide(q, [-1000.0, 0.0, -1001.0])
    assert d.probs[0] == 0.0 and d.probs[2] == 0.0  # exp underflows in float64
    expected = -(math.log(math.exp(0.0) + math.exp(-1.0)) - 1000.0)  # log-sum-exp over the two gold labels
    assert d.gold_nll == pytest.approx(expected, rel=1e-12)
    assert math.isfinite(d.to_dict()["gold_nll"])


def test_gold_nll_uses_the_corrected_scores_and_temperature():
    q = Question(context="x", candidates=["a", "bb"], gold=1)
    d = make_decision(q, q.candidates, [-2.0, -4.0], Usage(), normalization="byte", temperature=2.0)
    assert d.logprobs == (-2.0, -4.0) and d.corrected == (-2.0, -2.0)
    assert d.probs == pytest.approx((0.5, 0.5)) and d.gold_nll == pytest.approx(math.log(2))


def test_corrections_need_their_inputs():
    q = Question(context="x", candidates=["a", "b"])
    with pytest.raises(ValueError, match="normalization 'token' needs each candidate's token count"):
        make_decision(q, q.candidates, [-1.0, -2.0], Usage(), normalization="token")
    with pytest.raises(ValueError, match="normalization 'pmi' needs each candidate's prior log-likelihood"):
        make_decision(q, q.candidates, [-1.0, -2.0], Usage(), normalization="pmi")
    with pytest.raises(ValueError, match="unknown normalization 'mean'"):
        make_decision(q, q.candidates, [-1.0, -2.0], Usage(), normalization="mean")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        make_decision(q, q.candidates, [-1.0, -2.0], Usage(), temperature=0.0)
    d = make_decision(q, q.candidates, [-1.0, -3.0], Usage(), normalization="contextual", prior_logprobs=[-0.5, -4.0])
    assert d.corrected == (-0.5, 1.0) and d.choice == 1 and d.to_dict()["prior_logprobs"] == [-0.5, -4.0]
