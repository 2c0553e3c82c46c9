"""`jet`'s schedules: encoded questions -> candidate log-likelihoods, built on the `kernels` package.

Every schedule computes, for each candidate c with tokens (t1..tm) after prefix x,
    log p(c|x) = sum_k log_softmax(z(x, t<k))[tk]     (full vocabulary, teacher forcing)
and differs only in how the forward calls are laid out:
- independent: one full forward over prefix + candidate per candidate (the reference);
- batched: the prefix once with a KV cache, then the continuations as one padded batch per group;
- packed: prefix and continuations in ONE sequence laid out as a tree (`kernels.tree.TreeCall`: each token sees
  its own question's prefix and its own candidate's earlier tokens; explicit position ids). Several
  questions share that call as left-padded batch rows. Neighbouring questions whose prefixes begin with
  at least `min_shared` common tokens (e.g. the eight questions of one LIBERO frame) share one row whose
  common part runs once: common prefix -> each question's own prefix tail -> its candidates. A question
  too large for one call runs its prefix once with a cache and its continuations in packed groups.
  Across calls (`kernels.kept_prefix.KeptPrefix`, `jet`'s `reuse_prefix`): the last question's prefix keys are kept
  from the call's own cache; the next call's rows whose prefixes begin with at least `min_shared` of those
  tokens run over a copy of them (`run_rows` from `start`), and rows that do not are hidden from them.
The last candidate token is never fed: only its predecessor's logits are needed. Log-softmax runs
where the logits live; only the gathered candidate log-probs leave the device.

Usage: a row's common prefix is counted once, split evenly over the questions that share it (the earlier
ones take the remainder), so `prefix_tokens` summed over the questions is what the model ran. Tokens read
from a kept prefix are not in `prefix_tokens`: `Work.reused_tokens` splits them the same way over the
questions that read them (`Usage` has no field for them). The question whose prefix is kept reports the
kept bytes as `cache_bytes`.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import DynamicCache

from .kernels.accounting import Scored, Work, fed_tokens, model_device, packed_tokens, state_bytes
from .kernels.kept_prefix import KeptPrefix
from .kernels.logprobs import add_scores
from .kernels.packing import greedy_groups, row_batches, shared_rows, split_evenly
from .kernels.prefix import prefix_call, prefix_inputs
from .kernels.tree import TreeCall, row_states, run_chains, run_rows
from .prompts import EncodedQuestion

__all__ = [
    "Scored",
    "Work",
    "fed_tokens",
    "packed_tokens",
    "score_batched",
    "score_independent",
    "score_packed",
    "score_packed_many",
    "score_with_prefix_cache",
]


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


def score_with_prefix_cache(model, question: EncodedQuestion, scored: Scored, cache=None, greedy: bool = False):
    """Run the question's prefix (and images) once with a cache into `scored`: every candidate's first-token
    log-prob, the prefix work and the cache bytes. `cache`: one holding the prefix's first keys already (text
    only), extended in place. `greedy`: (log-prob, is argmax) pairs. Returns the cache."""
    inputs = prefix_inputs(model, question) if question.prefix_inputs is not None else None
    cache, scored.logprobs = prefix_call(
        model, question.prefix, [c[0] for c in question.continuations], scored.work, inputs, cache, greedy
    )
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
        targets = [
            [(k, tokens[k + 1], i) for k in range(len(tokens) - 1)]
            for i, tokens in ((i, question.continuations[i]) for i in batch)
        ]
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(len(batch))
        for i, value in run_chains(model, chains, targets, batch_cache, p).items():
            scored.logprobs[i] += value
        scored.work.candidate_tokens += sum(len(chain) for chain in chains)
        scored.work.forward_calls += 1
    return scored


# ---------------------------------------------------------------- packed


def row_call(
    questions: list[EncodedQuestion], members: list[int], common: int, unseen: int = 0
) -> tuple[TreeCall, list]:
    """One packed row: the members' common prefix once, each member's own prefix tail under it, and its
    candidates under the tail. Owners are (question index, candidate index). `unseen` keys come first, each a
    root of its own that no token of the row sees (a row that does not read a call's cached keys). Also
    returns each member's prefix keys in token order."""
    call = TreeCall()
    for _ in range(unseen):
        call.add(0, -1, 0)
    shared = call.add_chain(questions[members[0]].prefix[:common], -1, 0)
    head = list(range(unseen, unseen + common))
    keys = []
    for i in members:
        question = questions[i]
        first = len(call)
        last = call.add_chain(question.prefix[common:], shared, common)
        keys.append(head + list(range(first, len(call))))
        call.add_candidates(
            last, len(question.prefix), question.continuations, [(i, c) for c in range(len(question.continuations))]
        )
    return call, keys


@torch.inference_mode()
def score_packed_many(
    model,
    questions: list[EncodedQuestion],
    max_batch_tokens: int,
    min_shared: int = 0,
    kept: KeptPrefix | None = None,
    keep: int | None = None,
    greedy: bool = False,
) -> list[Scored]:
    """Score several questions: packed rows (one question, or several sharing a common prefix of at least
    `min_shared` tokens; 0: no sharing) of similar length share a call of at most max_batch_tokens fed tokens
    (padding included). A question too large for one call takes the cache path.

    `kept`: a prefix kept from an earlier call (None: no reuse across calls; `min_shared` 0 turns it off
    too). Text questions whose prefixes begin with at least `min_shared` of its tokens read that part from a
    copy of it (`KeptPrefix.reusable`) and run only the rest; rows that do not read it can share their calls
    (the cached keys hidden from them). Afterwards `kept` holds the prefix of question `keep` (default: the
    last one) taken from the call's own cache, nothing run twice, or nothing when that question has no text
    prefix longer than `min_shared`.

    `greedy`: also record, per candidate, whether every token is the model's argmax (`Scored.greedy`)."""
    results: list[Scored | None] = [None] * len(questions)
    if not questions:
        return results
    keep = len(questions) - 1 if keep is None else keep
    text = [not q.prefix_inputs for q in questions]
    reuse = kept is not None and min_shared > 0 and kept.usable(model)
    length, reading = (
        kept.reusable([q.prefix if t else None for q, t in zip(questions, text)], min_shared) if reuse else (0, [])
    )
    capture = reuse and text[keep] and len(questions[keep].prefix) > min_shared
    others = sorted(set(range(len(questions))) - set(reading))
    rows, alone, states = [], [], None  # rows: (members, common prefix, fed tokens, cached keys read)
    for part, start in ((reading, length), (others, 0)):
        found, single = shared_rows(
            [questions[i].prefix for i in part],
            [fed_tokens(questions[i]) for i in part],
            max_batch_tokens + start,
            min_shared,
            [text[i] for i in part],
        )
        rows += [([part[k] for k in members], common, tokens - start, start) for members, common, tokens in found]
        alone += [(part[k], start) for k in single]
    for i, start in alone:
        results[i], cache = _score_packed_with_cache(
            model, questions[i], max_batch_tokens, kept.cache(start) if start else None, greedy
        )
        if capture and i == keep:
            states = [(layer.keys, layer.values) for layer in cache.layers]
    for batch in row_batches([(r, row[2]) for r, row in enumerate(rows)], max_batch_tokens):
        start = max(rows[r][3] for r in batch)  # the kept keys when a row of the batch reads them, else none
        built = [row_call(questions, rows[r][0], rows[r][1], start - rows[r][3]) for r in batch]
        calls = [call for call, _ in built]
        holder = next((b for b, r in enumerate(batch) if keep in rows[r][0]), None) if capture else None
        if start:
            cache = kept.cache(start, len(batch))
        else:
            cache = DynamicCache(config=model.config) if holder is not None else None
        for r, sums in zip(batch, run_rows(model, calls, start, cache, greedy)):
            members, common, _, read = rows[r]
            for i, share in zip(members, split_evenly(common - read, len(members))):
                question = questions[i]
                logprobs = [sums[(i, c)] for c in range(len(question.continuations))]
                results[i] = Scored(
                    logprobs, Work(share + len(question.prefix) - common, fed_tokens(question), 1, 0)
                ).take_greedy()
        if holder is not None:
            states = row_states(cache, calls, start, holder, built[holder][1][rows[batch[holder]][0].index(keep)])
    if reuse:
        for i, share in zip(reading, split_evenly(length, len(reading))):
            results[i].work.reused_tokens = share
        if reading:
            kept.reused_tokens += length
            kept.reusing_calls += 1
        if states is not None:
            kept.keep(model, questions[keep].prefix, states)
            results[keep].work.cache_bytes = kept.nbytes
        else:
            kept.clear()
    return results


@torch.inference_mode()
def _score_packed_with_cache(model, question: EncodedQuestion, max_batch_tokens: int, cache=None, greedy: bool = False):
    """Prefix once with a cache (continuing `cache`, which holds its first keys, when given); continuations
    packed into groups of at most max_batch_tokens fed tokens. Returns (scored, the prefix cache)."""
    scored = Scored([])
    cache = score_with_prefix_cache(model, question, scored, cache, greedy)
    p = len(question.prefix)
    longer = [(i, len(c) - 1) for i, c in enumerate(question.continuations) if len(c) > 1]
    for group in greedy_groups(longer, max_batch_tokens):
        call = TreeCall()
        last = call.add_chain(question.prefix, -1, 0)  # the cached keys
        call.add_candidates(last, p, [question.continuations[i] for i in group], group)
        [sums] = run_rows(model, [call], start=p, cache=copy.deepcopy(cache), greedy=greedy)
        for i in group:
            scored.logprobs[i] = add_scores(scored.logprobs[i], sums[i])
        scored.work.candidate_tokens += len(call) - p
        scored.work.forward_calls += 1
    return scored.take_greedy(), cache


def score_packed(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Packed schedule for one question: a single call when it fits, else prefix cache + packed groups."""
    return score_packed_many(model, [question], max_batch_tokens)[0]
