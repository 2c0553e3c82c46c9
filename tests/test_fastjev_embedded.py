"""FastJEV on the embedded model (slow): T+S equals jet on real MMLU questions."""

import pytest


@pytest.mark.slow
def test_fastjev_equals_jet_on_mmlu():
    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers import make_scorer

    questions = load_mmlu(subset="per_subject_5", limit=6)
    fast = make_scorer("fastjev", template="none", components=["T", "S"])
    jet = make_scorer("jet", model=fast.loaded, template="none", schedule="independent")
    for a, b in zip(fast.decide_many(questions), jet.decide_many(questions)):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3
        assert a.choice == b.choice
