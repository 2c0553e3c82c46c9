"""`jet`'s schedules: encoded questions -> candidate log-likelihoods, built on `kernels.py`.

Every schedule computes, for each candidate c with tokens (t1..tm) after prefix x,
    log p(c|x) = sum_k log_softmax(z(x, t<k))[tk]     (full vocabulary, teacher forcing)
and differs only in how the forward calls are laid out:
- independent: one full forward over prefix + candidate per candidate (the reference);
- batched: the prefix once with a KV cache, then the continuations as one padded batch per group;
- packed: prefix and continuations in ONE sequence laid out as a tree (`kernels.TreeCall`: each token sees
  its own question's prefix and its own candidate's earlier tokens; explicit position ids). Several
  questions share that call as left-padded batch rows. Neighbouring questions whose prefixes begin with
  at least `min_shared` common tokens (e.g. the eight questions of one LIBERO frame) share one row whose
  common part runs once: common prefix -> each question's own prefix tail -> its candidates. A question
  too large for one call runs its prefix once with a cache and its continuations in packed groups.
The last candidate token is never fed: only its predecessor's logits are needed. Log-softmax runs
where the logits live; only the gathered candidate log-probs leave the device.

Usage: a row's common prefix is counted once, split evenly over the questions that share it (the earlier
ones take the remainder), so `prefix_tokens` summed over the questions is what the model ran.
"""

from __future__ import annotations

import copy

import torch

from .kernels import (Scored, TreeCall, Work, fed_tokens, greedy_groups, model_device, packed_tokens,
                      prefix_call, prefix_inputs, row_batches, run_chains, run_rows, shared_rows,
                      split_evenly, state_bytes)
from .prompts import EncodedQuestion

__all__ = ["Scored", "Work", "fed_tokens", "packed_tokens", "score_batched", "score_independent", "score_packed",
           "score_packed_many", "score_with_prefix_cache"]


# ---------------------------------------------------------------- independent (reference)

@torch.inference_mode()
def score_independent(model, question: EncodedQuestion) -> Scored:
    """One plain causal forward over prefix + candidate for every candidate."""
    device = model_device(model)
    scored = Scored([])
    p = len(question.prefix)
    for continuation in question.continuations:
        ids = torch.tensor([question.prefix + continuation], device=device)
        extra = prefix_inputs(model, question, len(continuation))
        logits = model(input_ids=ids, **extra).logits[0, p - 1 : p - 1 + len(continuation)]
        logprobs = torch.log_softmax(logits.double(), dim=-1)  # plain and exact; shares no code with the fast paths
        scored.logprobs.append(float(logprobs[torch.arange(len(continuation)), list(continuation)].sum()))
        scored.work.prefix_tokens += p
        scored.work.candidate_tokens += len(continuation)
        scored.work.forward_calls += 1
    scored.work.image_tokens = question.image_tokens
    return scored


# ---------------------------------------------------------------- prefix cache

def score_with_prefix_cache(model, question: EncodedQuestion, scored: Scored):
    """Run the question's prefix (and images) once with a cache into `scored`: every candidate's first-token
    log-prob, the prefix work and the cache bytes. Returns the cache."""
    inputs = prefix_inputs(model, question) if question.prefix_inputs is not None else None
    cache, scored.logprobs = prefix_call(model, question.prefix, [c[0] for c in question.continuations], scored.work,
                                         inputs)
    scored.work.image_tokens = question.image_tokens
    scored.work.cache_bytes = state_bytes(cache)
    return cache


# ---------------------------------------------------------------- batched

@torch.inference_mode()
def score_batched(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Prefix once with a cache; continuations as right-padded batches continuing a copy of it."""
    scored = Scored([])
    cache = score_with_prefix_cache(model, question, scored)
    p = len(question.prefix)
    longer = [(i, len(c) - 1) for i, c in enumerate(question.continuations) if len(c) > 1]
    for batch in row_batches(longer, max_batch_tokens):  # similar lengths together pad less
        chains = [question.continuations[i][:-1] for i in batch]
        targets = [[(k, tokens[k + 1], i) for k in range(len(tokens) - 1)]
                   for i, tokens in ((i, question.continuations[i]) for i in batch)]
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(len(batch))
        for i, value in run_chains(model, chains, targets, batch_cache, p).items():
            scored.logprobs[i] += value
        scored.work.candidate_tokens += sum(len(chain) for chain in chains)
        scored.work.forward_calls += 1
    return scored


# ---------------------------------------------------------------- packed

def _row_call(questions: list[EncodedQuestion], members: list[int], common: int) -> TreeCall:
    """One packed row: the members' common prefix once, each member's own prefix tail under it, and its
    candidates under the tail. Owners are (question index, candidate index)."""
    call = TreeCall()
    shared = call.add_chain(questions[members[0]].prefix[:common], -1, 0)
    for i in members:
        question = questions[i]
        last = call.add_chain(question.prefix[common:], shared, common)
        call.add_candidates(last, len(question.prefix), question.continuations,
                            [(i, c) for c in range(len(question.continuations))])
    return call


@torch.inference_mode()
def score_packed_many(model, questions: list[EncodedQuestion], max_batch_tokens: int, min_shared: int = 0) -> list[Scored]:
    """Score several questions: packed rows (one question, or several sharing a common prefix of at least
    `min_shared` tokens; 0: no sharing) of similar length share a call of at most max_batch_tokens (padding
    included). A question too large for one call takes the cache path."""
    results: list[Scored | None] = [None] * len(questions)
    rows, alone = shared_rows([q.prefix for q in questions], [fed_tokens(q) for q in questions], max_batch_tokens,
                              min_shared, [not q.prefix_inputs for q in questions])
    for i in alone:
        results[i] = _score_packed_with_cache(model, questions[i], max_batch_tokens)
    for batch in row_batches([(r, tokens) for r, (_, _, tokens) in enumerate(rows)], max_batch_tokens):
        calls = [_row_call(questions, rows[r][0], rows[r][1]) for r in batch]
        for r, sums in zip(batch, run_rows(model, calls)):
            members, common, _ = rows[r]
            for i, share in zip(members, split_evenly(common, len(members))):
                question = questions[i]
                logprobs = [sums[(i, c)] for c in range(len(question.continuations))]
                prefix = share + len(question.prefix) - common
                results[i] = Scored(logprobs, Work(prefix, fed_tokens(question), 1, 0))
    return results


@torch.inference_mode()
def _score_packed_with_cache(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Prefix once with a cache; continuations packed into groups of at most max_batch_tokens fed tokens."""
    scored = Scored([])
    cache = score_with_prefix_cache(model, question, scored)
    p = len(question.prefix)
    longer = [(i, len(c) - 1) for i, c in enumerate(question.continuations) if len(c) > 1]
    for group in greedy_groups(longer, max_batch_tokens):
        call = TreeCall()
        last = call.add_chain(question.prefix, -1, 0)  # the cached keys
        call.add_candidates(last, p, [question.continuations[i] for i in group], group)
        [sums] = run_rows(model, [call], start=p, cache=copy.deepcopy(cache))
        for i in group:
            scored.logprobs[i] += sums[i]
        scored.work.candidate_tokens += len(call) - p
        scored.work.forward_calls += 1
    return scored


def score_packed(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Packed schedule for one question: a single call when it fits, else prefix cache + packed groups."""
    return score_packed_many(model, [question], max_batch_tokens)[0]
