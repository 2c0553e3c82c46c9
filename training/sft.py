"""Supervised training of the scorer: minimize the JET gold NLL over the candidates.

The loss of a question is -log sum of q(c|x) over every candidate whose text equals the gold candidate's
text (the gold NLL of `Decision.gold_nll`, here with gradients): labelled question sets (JSONL, MMLU outside
the evaluated subset, LIBERO training episodes) and decisions of another agent (behaviour cloning: the
question it was asked and the control it chose) train the same way.
"""

from __future__ import annotations

from typing import Sequence

import torch

from jetgym.scorers import Question

from jetgym.scorers.decision import resolve_gold

from .options import SFTOptions


def gold_indices(question: Question) -> list[int]:
    """Every candidate index whose text equals the gold candidate's text."""
    candidates = list(question.candidates)
    labels = question.labels or tuple(str(i) for i in range(len(candidates)))
    gold = resolve_gold(question, labels)
    if gold is None:
        raise ValueError(f"question {question.id!r} has no gold answer: SFT needs labelled questions")
    return [i for i, text in enumerate(candidates) if text == candidates[gold]]


def check_labelled(questions: Sequence[Question], what: str) -> None:
    """Refuse an empty set or a question without gold (naming it), before any training step."""
    if not questions:
        raise ValueError(f"{what} holds no questions")
    for question in questions:
        if not question.candidates:
            raise ValueError(f"question {question.id!r} of {what} has no candidates: SFT needs categorical questions")
        gold_indices(question)


def gold_nll(log_q: Sequence[torch.Tensor], questions: Sequence[Question]) -> torch.Tensor:
    """Mean gold NLL of a minibatch (log-sum-exp over the equivalent gold candidates)."""
    losses = [-torch.logsumexp(lq[torch.tensor(gold_indices(q))], dim=0) for lq, q in zip(log_q, questions)]
    return torch.stack(losses).mean()


def sft_step(policy, optimizer, questions: Sequence[Question], options: SFTOptions, autocast: bool = False) -> float:
    """One gradient step on a minibatch; returns its loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = gold_nll(policy.evaluate(questions).log_q, questions)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), options.max_grad_norm)
    optimizer.step()
    policy.weights_changed()
    return float(loss.detach())


def evaluate_questions(scorer, questions: Sequence[Question]) -> dict:
    """Mean gold NLL and accuracy of the scorer's decisions (inference path, no gradient)."""
    if not questions:
        return {"gold_nll": None, "accuracy": None, "questions": 0}
    decisions = scorer.decide_many(list(questions))
    nll = [d.gold_nll for d in decisions]
    return {"gold_nll": sum(nll) / len(nll), "accuracy": sum(bool(d.correct) for d in decisions) / len(decisions),
            "questions": len(decisions)}
