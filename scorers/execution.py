"""Model calls that turn encoded questions into candidate log-likelihoods.

Every schedule computes, for each candidate c with tokens (t1..tm) after prefix x,
    log p(c|x) = sum_k log_softmax(z(x, t<k))[tk]     (full vocabulary, teacher forcing)
and differs only in how the forward calls are laid out:
- independent: one full forward over prefix + candidate per candidate (the reference);
- batched: the prefix once with a KV cache, then the continuations as one padded batch per group;
- packed: prefix and continuations in ONE sequence with a mask that lets each token see its own
  question's prefix and its own candidate's earlier tokens (explicit position ids). Several
  questions share that call as left-padded batch rows, each row with its own mask. A question
  too large for one call runs its prefix once with a cache and its continuations in packed groups.
The last candidate token is never fed: only its predecessor's logits are needed. Log-softmax runs
where the logits live; only the gathered candidate log-probs leave the device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from .prompts import EncodedQuestion
from .types import Usage


@dataclass
class Work:
    """Per-question counters, frozen into `Usage` at the end."""

    prefix_tokens: int = 0
    candidate_tokens: int = 0
    forward_calls: int = 0
    cache_bytes: int = 0
    image_tokens: int = 0

    def usage(self) -> Usage:
        return Usage(self.prefix_tokens, self.candidate_tokens, self.forward_calls, self.cache_bytes, self.image_tokens)


@dataclass
class Scored:
    """Candidate log-likelihoods of one question and the work done; `peak_recurrent_bytes` is the
    largest recurrent state kept at once (FastJEV's segmented schedule on hybrid models; 0 elsewhere)."""

    logprobs: list[float]
    work: Work = field(default_factory=Work)
    peak_recurrent_bytes: int = 0


def fed_tokens(question: EncodedQuestion) -> int:
    """Continuation tokens a cached or packed schedule feeds (all but each candidate's last)."""
    return sum(len(c) - 1 for c in question.continuations)


def cache_bytes(cache) -> int:
    layers = getattr(cache, "layers", None) or []
    total = 0
    for layer in layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def _device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


NORMALIZER_ROWS = 256  # logits rows normalized at a time


def _gather_sums(logits: torch.Tensor, rows: list[int], targets: list[int], owners: list[int], n: int) -> list[float]:
    """Sum of log_softmax(logits[row])[target] per owner; only the n sums leave the device.

    Normalized a chunk of rows at a time (no log_softmax copy of a many-row vocabulary tensor), as
    log_softmax does: (logit - max) - log(sum(exp(logits - max))), the picked values combined in float64."""
    device, logits = logits.device, logits.float()
    peak = logits.amax(dim=-1)
    log_total = torch.cat([(chunk - top[:, None]).exp_().sum(dim=-1).log_()
                           for chunk, top in zip(logits.split(NORMALIZER_ROWS), peak.split(NORMALIZER_ROWS))])
    rows_t = torch.tensor(rows, device=device)
    picked = (logits[rows_t, torch.tensor(targets, device=device)].double() - peak[rows_t].double()) - log_total[rows_t].double()
    sums = torch.zeros(n, dtype=torch.float64, device=device)
    sums.index_add_(0, torch.tensor(owners, device=device), picked)
    return sums.cpu().tolist()


def _prefix_inputs(model, question: EncodedQuestion, added: int = 0) -> dict:
    """The question's extra prefix inputs (image pixels, grid, ...; none for text) on the model's device.

    Per-token inputs (shape (1, prefix length), e.g. `mm_token_type_ids`) get `added` zeros (text tokens)
    for the candidate tokens that follow the prefix in the same call."""
    if not question.prefix_inputs:
        return {}
    device, p, inputs = _device(model), len(question.prefix), {}
    for name, value in question.prefix_inputs.items():
        if isinstance(value, torch.Tensor):
            if added and value.ndim == 2 and tuple(value.shape) == (1, p):
                value = torch.cat([value, value.new_zeros(1, added)], dim=1)
            value = value.to(device, model.dtype) if value.is_floating_point() else value.to(device)
        inputs[name] = value
    return inputs


def _forget_positions(model) -> None:
    """Drop position offsets a vision-language model kept from its last prefix (Qwen-VL `rope_deltas`,
    which its cached calls add to the cache length): the next prefix call sets them afresh."""
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


# ---------------------------------------------------------------- independent (reference)

@torch.inference_mode()
def score_independent(model, question: EncodedQuestion) -> Scored:
    """One plain causal forward over prefix + candidate for every candidate."""
    device = _device(model)
    scored = Scored([])
    p = len(question.prefix)
    for continuation in question.continuations:
        ids = torch.tensor([question.prefix + continuation], device=device)
        extra = _prefix_inputs(model, question, len(continuation))
        logits = model(input_ids=ids, **extra).logits[0, p - 1 : p - 1 + len(continuation)]
        logprobs = torch.log_softmax(logits.double(), dim=-1)  # plain and exact; shares no code with the fast paths
        scored.logprobs.append(float(logprobs[torch.arange(len(continuation)), list(continuation)].sum()))
        scored.work.prefix_tokens += p
        scored.work.candidate_tokens += len(continuation)
        scored.work.forward_calls += 1
    scored.work.image_tokens = question.image_tokens
    return scored


# ---------------------------------------------------------------- prefix cache

@torch.inference_mode()
def _prefix_with_cache(model, question: EncodedQuestion, scored: Scored):
    """Run the prefix once, keep its cache, and score every candidate's first token from its last logits."""
    device = _device(model)
    extra = _prefix_inputs(model, question)
    if question.prefix_inputs is not None:
        _forget_positions(model)
    out = model(input_ids=torch.tensor([question.prefix], device=device), use_cache=True, logits_to_keep=1, **extra)
    firsts = [c[0] for c in question.continuations]
    scored.logprobs = _gather_sums(out.logits[0, -1:], [0] * len(firsts), firsts, list(range(len(firsts))), len(firsts))
    scored.work.prefix_tokens += len(question.prefix)
    scored.work.image_tokens = question.image_tokens
    scored.work.forward_calls += 1
    scored.work.cache_bytes = cache_bytes(out.cache)
    return out.cache


def _groups(sizes: list[tuple[int, int]], capacity: int) -> list[list[int]]:
    """Greedy groups of item indices whose summed size stays within capacity (one item at least)."""
    groups, current, used = [], [], 0
    for index, size in sizes:
        if current and used + size > capacity:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    if current:
        groups.append(current)
    return groups


# ---------------------------------------------------------------- batched

@torch.inference_mode()
def score_batched(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Prefix once with a cache; continuations as right-padded batches continuing a copy of it."""
    scored = Scored([])
    cache = _prefix_with_cache(model, question, scored)
    device = _device(model)
    p = len(question.prefix)
    longer = [(i, len(c) - 1) for i, c in enumerate(question.continuations) if len(c) > 1]
    batches = _row_batches(longer, max_batch_tokens)  # similar lengths together pad less
    for batch in batches:
        width = max(len(question.continuations[i]) - 1 for i in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), p + width, dtype=torch.long)
        mask[:, :p] = 1
        rows, targets, owners = [], [], []
        for b, i in enumerate(batch):
            tokens = question.continuations[i]
            ids[b, : len(tokens) - 1] = torch.tensor(tokens[:-1])
            mask[b, p : p + len(tokens) - 1] = 1
            for k in range(len(tokens) - 1):
                rows.append(b * width + k)
                targets.append(tokens[k + 1])
                owners.append(b)
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(len(batch))
        positions = torch.arange(p, p + width).expand(len(batch), width)
        out = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
            cache=batch_cache, use_cache=True,
        )
        sums = _gather_sums(out.logits.reshape(-1, out.logits.shape[-1]), rows, targets, owners, len(batch))
        for b, i in enumerate(batch):
            scored.logprobs[i] += sums[b]
        scored.work.candidate_tokens += sum(len(question.continuations[i]) - 1 for i in batch)
        scored.work.forward_calls += 1
    return scored


# ---------------------------------------------------------------- packed

class PackedCall:
    """One question's row of a packed forward call: token ids tagged with (candidate, position), and
    the logit rows to gather.

    Token i may attend to token j iff j's position is not after i's and j is a prefix token
    (candidate -1) or belongs to i's own candidate. Several rows (questions) run as one batch.
    """

    def __init__(self):
        self.tokens: list[int] = []
        self.candidate: list[int] = []
        self.position: list[int] = []
        self.rows: list[int] = []  # token index whose logits predict the target
        self.targets: list[int] = []
        self.owners: list[int] = []  # output slot of the candidate the target belongs to

    def __len__(self):
        return len(self.tokens)

    def _append(self, token: int, candidate: int, position: int):
        self.tokens.append(token)
        self.candidate.append(candidate)
        self.position.append(position)

    def add_prefix(self, prefix, first_tokens: list[int], owners: list[int]):
        for position, token in enumerate(prefix):
            self._append(token, -1, position)
        last = len(self.tokens) - 1
        for token, owner in zip(first_tokens, owners):
            self.rows.append(last)
            self.targets.append(token)
            self.owners.append(owner)

    def add_continuation(self, start: int, tokens, owner: int):
        """Feed all but the last token; each fed token predicts the next one."""
        for k, token in enumerate(tokens[:-1]):
            self._append(token, owner, start + k)
            self.rows.append(len(self.tokens) - 1)
            self.targets.append(tokens[k + 1])
            self.owners.append(owner)

    def allowed(self, cached: int = 0) -> torch.Tensor:
        """Boolean (queries, cached + queries) visibility; `cached` prefix tokens come first."""
        candidate = torch.tensor(self.candidate)
        position = torch.tensor(self.position)
        key_candidate = torch.cat([torch.full((cached,), -1), candidate])
        key_position = torch.cat([torch.arange(cached), position])
        return (key_position[None, :] <= position[:, None]) & (
            (key_candidate[None, :] == -1) | (key_candidate[None, :] == candidate[:, None]))


@torch.inference_mode()
def run_packed(model, calls: list[PackedCall], n_outputs: list[int], cache=None, cached: int = 0) -> list[list[float]]:
    """One forward call over `calls` as left-padded batch rows; returns the summed log-probs per output slot.

    Left padding ends every row at the same position, so the logit rows kept (the union over rows)
    stay close to the longest row's needs. A padding token attends only to itself."""
    device = _device(model)
    width = max(len(call) for call in calls)
    ids = torch.zeros(len(calls), width, dtype=torch.long)
    positions = torch.zeros(len(calls), width, dtype=torch.long)
    allowed = torch.zeros(len(calls), width, cached + width, dtype=torch.bool)
    rows, targets, owners, pads, offset = [], [], [], [], 0
    for b, call in enumerate(calls):
        pad = width - len(call)
        pads.append(pad)
        ids[b, pad:] = torch.tensor(call.tokens)
        positions[b, pad:] = torch.tensor(call.position)
        visible = call.allowed(cached)
        allowed[b, pad:, :cached] = visible[:, :cached]
        allowed[b, pad:, cached + pad:] = visible[:, cached:]
        allowed[b, torch.arange(pad), cached + torch.arange(pad)] = True
        targets += call.targets
        owners += [offset + owner for owner in call.owners]
        offset += n_outputs[b]
    keep = sorted({pad + r for call, pad in zip(calls, pads) for r in call.rows})
    column = {position: k for k, position in enumerate(keep)}
    for b, (call, pad) in enumerate(zip(calls, pads)):
        rows += [b * len(keep) + column[pad + r] for r in call.rows]
    mask = torch.zeros(allowed.shape, dtype=model.dtype).masked_fill_(~allowed, torch.finfo(model.dtype).min)
    out = model(
        input_ids=ids.to(device),
        attention_mask=mask[:, None].to(device),
        position_ids=positions.to(device),
        cache=cache,
        use_cache=cache is not None,
        logits_to_keep=torch.tensor(keep, device=device),
    )
    sums = _gather_sums(out.logits.reshape(-1, out.logits.shape[-1]), rows, targets, owners, offset)
    starts = [sum(n_outputs[:b]) for b in range(len(calls))]
    return [sums[start : start + n] for start, n in zip(starts, n_outputs)]


def packed_cost(question: EncodedQuestion) -> int:
    """Tokens the question adds to a packed call (prefix + fed continuation tokens)."""
    return len(question.prefix) + fed_tokens(question)


def _question_call(question: EncodedQuestion) -> PackedCall:
    call = PackedCall()
    owners = list(range(len(question.continuations)))
    call.add_prefix(question.prefix, [c[0] for c in question.continuations], owners)
    for continuation, owner in zip(question.continuations, owners):
        call.add_continuation(len(question.prefix), continuation, owner)
    return call


def _row_batches(costs: list[tuple[int, int]], capacity: int) -> list[list[int]]:
    """Batches of similar-length rows (sorted by cost) whose padded size rows x longest stays within capacity."""
    batches, current, longest = [], [], 0
    for index, cost in sorted(costs, key=lambda item: item[1]):
        if current and (len(current) + 1) * max(longest, cost) > capacity:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, cost)
    if current:
        batches.append(current)
    return batches


@torch.inference_mode()
def score_packed_many(model, questions: list[EncodedQuestion], max_batch_tokens: int) -> list[Scored]:
    """Score several questions: each is one packed row; rows of similar length share a call of at most
    max_batch_tokens (padding included). A question too large for one call takes the cache path."""
    results: list[Scored | None] = [None] * len(questions)
    fitting = []
    for i, question in enumerate(questions):
        if packed_cost(question) <= max_batch_tokens:
            fitting.append((i, packed_cost(question)))
        else:
            results[i] = _score_packed_with_cache(model, question, max_batch_tokens)
    for batch in _row_batches(fitting, max_batch_tokens):
        calls = [_question_call(questions[i]) for i in batch]
        sums = run_packed(model, calls, [len(questions[i].continuations) for i in batch])
        for i, logprobs in zip(batch, sums):
            question = questions[i]
            results[i] = Scored(logprobs, Work(len(question.prefix), fed_tokens(question), 1, 0))
    return results


@torch.inference_mode()
def _score_packed_with_cache(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Prefix once with a cache; continuations packed into groups of at most max_batch_tokens fed tokens."""
    scored = Scored([])
    cache = _prefix_with_cache(model, question, scored)
    p = len(question.prefix)
    longer = [(i, len(c) - 1) for i, c in enumerate(question.continuations) if len(c) > 1]
    for group in _groups(longer, max_batch_tokens):
        call = PackedCall()
        for slot, i in enumerate(group):
            call.add_continuation(p, question.continuations[i], slot)
        [sums] = run_packed(model, [call], [len(group)], cache=copy.deepcopy(cache), cached=p)
        for slot, i in enumerate(group):
            scored.logprobs[i] += sums[slot]
        scored.work.candidate_tokens += len(call)
        scored.work.forward_calls += 1
    return scored


def score_packed(model, question: EncodedQuestion, max_batch_tokens: int) -> Scored:
    """Packed schedule for one question: a single call when it fits, else prefix cache + packed groups."""
    return score_packed_many(model, [question], max_batch_tokens)[0]
