"""`greedy=True` in the packed schedule: every candidate's flag says whether each of its tokens is the argmax of the
logits that predict it (first index on ties), on every path (shared rows, cache + groups, kept prefix)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from jetgym.scorers.execution import score_packed_many  # noqa: E402
from jetgym.scorers.kernels.kept_prefix import KeptPrefix  # noqa: E402
from jetgym.scorers.prompts import EncodedQuestion  # noqa: E402

from tiny_models import random_question, tiny_llama  # noqa: E402


def greedy_chain(model, prefix, length):
    ids = list(prefix)
    with torch.no_grad():
        for _ in range(length):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return tuple(ids[len(prefix) :])


def reference(model, question):
    flags, sums = [], []
    for cont in question.continuations:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([question.prefix + cont])).logits[0].double()
        rows = logits[len(question.prefix) - 1 : len(question.prefix) - 1 + len(cont)]
        flags.append(bool((rows.argmax(-1) == torch.tensor(cont)).all()))
        sums.append(float(torch.log_softmax(rows, -1)[torch.arange(len(cont)), list(cont)].sum()))
    return flags, sums


@pytest.mark.parametrize("max_batch_tokens, min_shared", [(1024, 0), (1024, 4), (12, 0)])
def test_greedy_flags_match_the_argmax_of_a_plain_forward(max_batch_tokens, min_shared):
    model, rng = tiny_llama(), random.Random(3)
    questions = []
    common = tuple(rng.randrange(101) for _ in range(6))
    for k in range(6):
        base = random_question(rng)
        prefix = (common + base.prefix) if k % 2 else base.prefix
        chain = greedy_chain(model, prefix, 3)
        changed = chain[:-1] + ((chain[-1] + 1) % 101,)
        questions.append(EncodedQuestion(prefix, base.continuations + (chain, chain[:1], changed)))
    kept = KeptPrefix() if min_shared else None
    for _ in range(2):  # the second pass reads the kept prefix where it applies
        for question, scored in zip(
            questions, score_packed_many(model, questions, max_batch_tokens, min_shared, kept, greedy=True)
        ):
            flags, sums = reference(model, question)
            assert scored.greedy == flags
            assert scored.greedy[-3:] == [True, True, False]
            assert scored.logprobs == pytest.approx(sums, abs=1e-4)


def test_without_greedy_the_results_carry_no_flags():
    model, rng = tiny_llama(), random.Random(4)
    [scored] = score_packed_many(model, [random_question(rng)], 1024)
    assert scored.greedy is None and all(isinstance(v, float) for v in scored.logprobs)
