"""Supervised training of the scorer: minimize the JET gold NLL over the candidates.

The loss of a question is -log sum of q(c|x) over every candidate whose text equals the gold candidate's
text (the gold NLL of `Decision.gold_nll`, here with gradients): labelled question sets (JSONL, MMLU outside
the evaluated subset, LIBERO training episodes) and decisions of another agent (behaviour cloning: the
question it was asked and the control it chose) train the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import torch

from jetgym.scorers import Question

from jetgym.scorers.decision import resolve_gold

from .data_parallel import Shards


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


def gold_nll(
    log_q: Sequence[torch.Tensor], questions: Sequence[Question], accepted: Sequence[Sequence[int]] | None = None
) -> torch.Tensor:
    """The gold NLL of each question (log-sum-exp over the equivalent gold candidates, or over its `accepted`
    candidate indices)."""
    golds = accepted or [gold_indices(q) for q in questions]
    return torch.stack([-torch.logsumexp(lq[torch.tensor(list(g))], dim=0) for lq, g in zip(log_q, golds)])


@dataclass(frozen=True)
class Step:
    """One gradient step's mean loss and, per question, as the forward before the step saw it: its gold NLL and
    whether the argmax agreed with the gold text."""

    loss: float
    nll: list[float]
    agreed: list[bool]


def fit_step(
    policy,
    optimizer,
    questions: Sequence[Question],
    options,
    autocast: bool = False,
    shards: Shards = Shards(),
    weights: Sequence[float] | None = None,
    accepted: Sequence[Sequence[int]] | None = None,
) -> Step:
    """One gradient step on a minibatch (each rank computing its share): the minibatch's mean loss (each
    question's gold NLL times its weight, `weights`, default 1) and each question's gold NLL and argmax agreement
    (summed over the ranks). `accepted`: per question, the candidate indices that count as its gold (default:
    the gold's text)."""
    optimizer.zero_grad(set_to_none=True)
    indices = shards.mine(len(questions))
    mine = [questions[i] for i in indices]
    golds = [accepted[i] for i in indices] if accepted is not None else [gold_indices(q) for q in mine]
    total, nll_of, agreed = 0.0, [0.0] * len(questions), [0.0] * len(questions)
    if mine:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            log_q = policy.evaluate(mine).log_q
            nll = gold_nll(log_q, mine, golds)
            for i, lq, g, value in zip(indices, log_q, golds, nll.detach().tolist()):
                nll_of[i], agreed[i] = value, float(int(torch.argmax(lq.detach())) in g)
            if weights is not None:
                nll = nll * torch.tensor([float(weights[i]) for i in indices], dtype=nll.dtype)
            loss = nll.sum() / len(questions)
        loss.backward()
        total = float(loss.detach())
    shards.sum_gradients(policy.parameters())
    torch.nn.utils.clip_grad_norm_(policy.parameters(), options.max_grad_norm)
    optimizer.step()
    policy.weights_changed()
    summed = shards.sum([total, *nll_of, *agreed])
    n = len(questions)
    return Step(summed[0], summed[1 : n + 1], [a > 0.5 for a in summed[n + 1 :]])


def evaluate_questions(scorer, questions: Sequence[Question], shards: Shards = Shards()) -> dict:
    """Mean gold NLL and accuracy of the scorer's decisions (inference path, no gradient)."""
    if not questions:
        return {"gold_nll": None, "accuracy": None, "questions": 0}
    scored = shards.map(lambda part: [(d.gold_nll, bool(d.correct)) for d in scorer.decide_many(part)], questions)
    return {
        "gold_nll": sum(n for n, _ in scored) / len(scored),
        "accuracy": sum(c for _, c in scored) / len(scored),
        "questions": len(scored),
    }


def split_held_out(questions: Sequence[Question], fraction: float) -> tuple[list, list]:
    """(train, held out): questions are grouped into episodes by their id without its last two '/'-parts
    (LIBERO `set/task/demo_N/tNNN/type`, behaviour cloning `steps/episode-N/step-S/action`; other ids are
    their own group), and every k-th group, k = round(1 / fraction), starting with the second, is held out,
    so the steps of one episode never straddle the split."""
    if not fraction:
        return list(questions), []
    every = max(2, round(1 / fraction))
    group = [q.id.rsplit("/", 2)[0] if q.id.count("/") >= 2 else q.id for q in questions]
    order = {name: k for k, name in enumerate(dict.fromkeys(group))}
    held = [order[name] % every == 1 for name in group]
    return ([q for q, h in zip(questions, held) if not h], [q for q, h in zip(questions, held) if h])


def _question_key(question: Question) -> tuple:
    if question.images:
        raise ValueError(
            f"train.unique compares question texts, and question {question.id!r} has images: leave "
            f"train.unique=false for question sets with images"
        )
    return json.dumps(question.context, sort_keys=True), tuple(question.candidates), question.gold


def distinct_split(train: Sequence[Question], held_out: Sequence[Question]) -> tuple[list, list, dict]:
    """(train, held out, counts) with every question once (`train.unique`): a training question whose context,
    candidates and gold equal an earlier one's is left out, and so is a held-out question that equals a training
    one or an earlier held-out one, so the held-out split measures unseen questions. Repeats are common in
    recorded episodes of deterministic envs (a loop visits the same states again and again)."""
    seen: set[tuple] = set()

    def first_time(question: Question) -> bool:
        key = _question_key(question)
        new = key not in seen
        seen.add(key)
        return new

    kept_train = [q for q in train if first_time(q)]
    kept_held = [q for q in held_out if first_time(q)]
    return (
        kept_train,
        kept_held,
        {
            "train_repeats_left_out": len(train) - len(kept_train),
            "held_out_repeats_left_out": len(held_out) - len(kept_held),
        },
    )
