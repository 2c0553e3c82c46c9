"""The model-call kernels every schedule of `jet` (`execution.py`, `sequential.py`) and FastJEV (`fastjev/`) is
built from.

- `prefix_call`: a context once with a cache; its last logits give the log-probs of the first candidate tokens.
- `TreeCall`: the tokens of a packed call as a forest. Every key (cached or fed) has a parent key and an
  explicit position; a token sees its ancestors and itself, nothing else. `jet`'s packed row (prefix, then
  candidate chains hanging from its last token), a shared context with several questions' tails under it,
  and FastJEV's candidate tries are all such forests.
- `run_rows`: several `TreeCall`s as left-padded batch rows of ONE forward call, each with a dense ancestor
  mask (any attention implementation; attention-only models), optionally over a cache of their first keys.
- `run_chains`: right-padded chains continuing one cache (padding after a chain's last token changes none of
  its outputs, so recurrent layers may run them too).
- `gather_sums` / `gather_by_owner`: summed log_softmax of the target tokens per owner; only the sums leave
  the device (with `greedy`, also whether every target is its row's argmax: lm-eval's `is_greedy`).
- `row_batches` / `greedy_groups`: how items of given sizes fill calls of a token capacity.
- `shared_prefix_groups` / `shared_rows`: runs of neighbouring questions whose prefixes begin alike, packed
  as rows with the common part once.
- `KeptPrefix` / `row_states`: one text prefix's keys/values kept between calls (`jet`'s `reuse_prefix`), and
  the states of a packed row's keys read back from the cache of `run_rows`.
- `state_bytes` / `live_bytes`: the one byte counter of cached states (per tensor, or per distinct storage).
Masked row calls read keys through grouped-query attention (`attention.grouped_rows`, no `repeat_kv`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import torch

from .attention import grouped_rows
from .prompts import EncodedQuestion
from .types import Usage


@dataclass
class Work:
    """Per-question counters, frozen into `Usage` at the end.

    `reused_tokens`: prefix tokens read from a prefix kept by an earlier call instead of computed (never
    counted in `prefix_tokens`); `Usage` has no field for it, the scorer sums it (`KeptPrefix.reused_tokens`)."""

    prefix_tokens: int = 0
    candidate_tokens: int = 0
    forward_calls: int = 0
    cache_bytes: int = 0
    image_tokens: int = 0
    reused_tokens: int = 0

    def usage(self) -> Usage:
        return Usage(self.prefix_tokens, self.candidate_tokens, self.forward_calls, self.cache_bytes, self.image_tokens)


@dataclass
class Scored:
    """Candidate log-likelihoods of one question and the work done; `peak_recurrent_bytes` is the
    largest recurrent state kept at once (FastJEV's segmented schedule on hybrid models; 0 elsewhere)."""

    logprobs: list[float]
    work: Work = field(default_factory=Work)
    peak_recurrent_bytes: int = 0
    greedy: list[bool] | None = None  # per candidate: every token is the argmax (only when asked, see `gather_sums`)

    def take_greedy(self) -> "Scored":
        """Split (sum, greedy) pairs gathered with `greedy=True` into `logprobs` and `greedy`."""
        if self.logprobs and isinstance(self.logprobs[0], tuple):
            self.greedy = [bool(flag) for _, flag in self.logprobs]
            self.logprobs = [value for value, _ in self.logprobs]
        return self


def fed_tokens(question: EncodedQuestion) -> int:
    """Continuation tokens a cached or packed schedule feeds (all but each candidate's last)."""
    return sum(len(c) - 1 for c in question.continuations)


def packed_tokens(question: EncodedQuestion) -> int:
    """Tokens a question adds to a packed call on its own: prefix + fed continuation tokens."""
    return len(question.prefix) + fed_tokens(question)


def model_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


# ---------------------------------------------------------------- log-probs

NORMALIZER_ROWS = 256  # logits rows normalized at a time


def gather_sums(logits: torch.Tensor, rows: list[int], targets: list[int], owners: list[int], n: int,
                greedy: bool = False) -> list:
    """Sum of log_softmax(logits[row])[target] per owner (0..n-1); only the n sums leave the device.

    Normalized a chunk of rows at a time (no log_softmax copy of a many-row vocabulary tensor), as
    log_softmax does: (logit - max) - log(sum(exp(logits - max))), the picked values combined in float64.
    `greedy`: each value is a pair (sum, whether every target of the owner is its row's argmax, the first index
    on ties as `torch.argmax` picks it)."""
    device, logits = logits.device, logits.float()
    peak = logits.amax(dim=-1)
    log_total = torch.cat([(chunk - top[:, None]).exp_().sum(dim=-1).log_()
                           for chunk, top in zip(logits.split(NORMALIZER_ROWS), peak.split(NORMALIZER_ROWS))])
    rows_t, targets_t, owners_t = (torch.tensor(v, device=device) for v in (rows, targets, owners))
    picked = (logits[rows_t, targets_t].double() - peak[rows_t].double()) - log_total[rows_t].double()
    sums = torch.zeros(n, dtype=torch.float64, device=device)
    sums.index_add_(0, owners_t, picked)
    if not greedy:
        return sums.cpu().tolist()
    top = torch.cat([chunk.argmax(dim=-1) for chunk in logits.split(NORMALIZER_ROWS)])
    misses = torch.zeros(n, dtype=torch.long, device=device)
    misses.index_add_(0, owners_t, (top[rows_t] != targets_t).long())
    return [(value, miss == 0) for value, miss in zip(sums.cpu().tolist(), misses.cpu().tolist())]


def gather_by_owner(logits: torch.Tensor, rows: list[int], targets: list[int], owners: list[Hashable],
                    greedy: bool = False) -> dict:
    """`gather_sums` with any hashable owners: {owner: summed log-prob} (with `greedy`: {owner: (sum, greedy)})."""
    slots = {owner: i for i, owner in enumerate(dict.fromkeys(owners))}
    if not slots:
        return {}
    sums = gather_sums(logits, rows, targets, [slots[o] for o in owners], len(slots), greedy)
    return dict(zip(slots, sums))


def add_scores(total, part):
    """Add a summed log-prob to another; (sum, greedy) pairs add their sums and AND their greedy flags."""
    if isinstance(total, tuple):
        return total[0] + part[0], total[1] and part[1]
    return total + part


# ---------------------------------------------------------------- prefix

def prefix_inputs(model, question: EncodedQuestion, added: int = 0) -> dict:
    """The question's extra prefix inputs (image pixels, grid, ...; none for text) on the model's device.

    Per-token inputs (shape (1, prefix length), e.g. `mm_token_type_ids`) get `added` zeros (text tokens)
    for the candidate tokens that follow the prefix in the same call."""
    if not question.prefix_inputs:
        return {}
    device, p, inputs = model_device(model), len(question.prefix), {}
    for name, value in question.prefix_inputs.items():
        if isinstance(value, torch.Tensor):
            if added and value.ndim == 2 and tuple(value.shape) == (1, p):
                value = torch.cat([value, value.new_zeros(1, added)], dim=1)
            value = value.to(device, model.dtype) if value.is_floating_point() else value.to(device)
        inputs[name] = value
    return inputs


def forget_positions(model) -> None:
    """Drop position offsets a vision-language model kept from its last prefix (Qwen-VL `rope_deltas`,
    which its cached calls add to the cache length): the next prefix call sets them afresh."""
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


@torch.inference_mode()
def prefix_call(model, prefix: Sequence[int], targets: Sequence[int], work: Work, inputs: dict | None = None,
                cache=None, greedy: bool = False):
    """Run `prefix` once with a cache (every layer); return (cache, log-probs of `targets` as next tokens).

    `inputs`: the prefix's extra model inputs (`prefix_inputs`), None for text. `cache`: a cache already
    holding the prefix's first keys (text only; it is extended in place and returned): only the rest runs.
    Counts the prefix tokens run and the call in `work`. `greedy`: (log-prob, is argmax) pairs."""
    if inputs is not None:
        forget_positions(model)
    done = 0 if cache is None else cache.get_seq_length()
    if not 0 <= done < len(prefix) or (done and inputs):
        raise ValueError(f"a cache of {done} keys cannot start a text prefix of {len(prefix)} tokens")
    out = model(input_ids=torch.tensor([list(prefix[done:])], device=model_device(model)), use_cache=True,
                logits_to_keep=1, cache=cache, **(inputs or {}))
    sums = gather_sums(out.logits[0, -1:], [0] * len(targets), list(targets), list(range(len(targets))), len(targets),
                       greedy)
    work.prefix_tokens += len(prefix) - done
    work.forward_calls += 1
    return out.cache, sums


# ---------------------------------------------------------------- filling calls

def greedy_groups(sizes: list[tuple[int, int]], capacity: int) -> list[list[int]]:
    """Greedy groups of item indices, in order, whose summed size stays within capacity (one item at least)."""
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


def row_batches(costs: list[tuple[int, int]], capacity: int) -> list[list[int]]:
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


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def shared_prefix_groups(prefixes: Sequence[Sequence[int]], min_shared: int,
                         shareable: Sequence[bool] | None = None) -> list[tuple[list[int], int]]:
    """(member indices, common prefix length) for runs of neighbouring prefixes scored with their common
    part once; a prefix alone has common length = its own length.

    A prefix joins the run before it when its longest common prefix with the run's common part is at least
    `min_shared` tokens (0: never) and the tokens saved do not drop (common x (members - 1) after joining is
    not below it before). `shareable[i]` False keeps item i alone (e.g. a question with images)."""
    groups: list[tuple[list[int], int]] = []
    for i, prefix in enumerate(prefixes):
        if groups and min_shared > 0 and (shareable is None or shareable[i]):
            members, common = groups[-1]
            if shareable is None or shareable[members[0]]:
                shared = common_length(prefixes[members[0]][:common], prefix)
                if shared >= min_shared and shared * len(members) >= common * (len(members) - 1):
                    groups[-1] = (members + [i], shared)
                    continue
        groups.append(([i], len(prefix)))
    return groups


def shared_rows(prefixes: Sequence[Sequence[int]], own: Sequence[int], capacity: int, min_shared: int,
                shareable: Sequence[bool] | None = None) -> tuple[list[tuple[list[int], int, int]], list[int]]:
    """Packed rows (members, common prefix length, tokens) of at most `capacity` tokens, and the items too
    large for any row. A row's tokens: its common prefix once, then each member's prefix tail and its `own`
    tokens (fed candidate tokens or trie nodes). A sharing group too large for one row is split into
    consecutive rows, each with the common part once."""
    rows, alone = [], []
    for members, common in shared_prefix_groups(prefixes, min_shared, shareable):
        current, used = [], common
        for i in members:
            tokens = len(prefixes[i]) - common + own[i]
            if common + tokens > capacity:
                alone.append(i)
                continue
            if current and used + tokens > capacity:
                rows.append((current, common, used))
                current, used = [], common
            current.append(i)
            used += tokens
        if current:
            rows.append((current, common, used))
    return rows, alone


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` in `parts` integer shares summing to it, the earlier parts taking the remainder."""
    return [total // parts + (k < total % parts) for k in range(parts)]


# ---------------------------------------------------------------- packed calls

class TreeCall:
    """The tokens of a packed forward call, laid out as a forest.

    Keys are numbered in order: key k has a token, a parent key (-1: none) and an explicit position. A
    token attends to its ancestors and itself only. A run may feed the keys from `start` on, the keys
    before it being already in the cache. Each target names the key whose logits predict it and the
    owner (any hashable) whose log-likelihood it joins; a run gathers the targets of the keys it feeds."""

    def __init__(self):
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.position: list[int] = []
        self.rows: list[int] = []  # key whose logits predict the target
        self.targets: list[int] = []
        self.owners: list[Hashable] = []

    def __len__(self):
        return len(self.tokens)

    def add(self, token: int, parent: int, position: int) -> int:
        self.tokens.append(token)
        self.parent.append(parent)
        self.position.append(position)
        return len(self.tokens) - 1

    def add_chain(self, tokens: Sequence[int], parent: int, position: int) -> int:
        """A chain of tokens under `parent` from `position` on; returns its last key (`parent` when empty)."""
        for k, token in enumerate(tokens):
            parent = self.add(token, parent, position + k)
        return parent

    def predict(self, key: int, target: int, owner: Hashable) -> None:
        self.rows.append(key)
        self.targets.append(target)
        self.owners.append(owner)

    def add_candidates(self, context: int, position: int, continuations, owners) -> None:
        """Candidate chains after the key `context` (the last token of their prefix, at position - 1): its
        logits predict each first token; all but each candidate's last token are fed and predict the next."""
        for tokens, owner in zip(continuations, owners):
            self.predict(context, tokens[0], owner)
            key = context
            for k, token in enumerate(tokens[:-1]):
                key = self.add(token, key, position + k)
                self.predict(key, tokens[k + 1], owner)

    def visible(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Boolean (end - start, end) mask: key j is visible to fed key i iff j is i or an ancestor of i.

        From a depth-first numbering: j is an ancestor-or-self of i iff order[j] <= order[i] < after[j]."""
        end = len(self) if end is None else end
        children: list[list[int]] = [[] for _ in range(end)]
        roots = []
        for k in range(end):
            parent = self.parent[k]
            (children[parent] if parent >= 0 else roots).append(k)
        order, after, counter = [0] * end, [0] * end, 0
        stack = [(k, False) for k in reversed(roots)]
        while stack:
            key, closing = stack.pop()
            if closing:
                after[key] = counter
                continue
            order[key] = counter
            counter += 1
            stack.append((key, True))
            stack.extend((child, False) for child in reversed(children[key]))
        first, last = torch.tensor(order), torch.tensor(after)
        return (first[None, :] <= first[start:, None]) & (first[start:, None] < last[None, :])

    def fed_targets(self, start: int, end: int) -> list[int]:
        """Indices of the targets whose row is fed by a run of keys [start, end)."""
        return [t for t, row in enumerate(self.rows) if start <= row < end]


@dataclass
class RowLayout:
    """The inputs of one `run_rows`-style call: `TreeCall`s as left-padded batch rows.

    ids / positions (rows, width); `allowed` (rows, width, start + width) the ancestor masks (a padding token
    sees only itself); `keep` the columns whose logits are needed (the union over rows); `rows` / `targets` /
    `owners` one entry per target, `rows` indexing the flattened (row, kept column) logits, owners (row,
    owner); `pads` each row's left padding."""

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    keep: list[int]
    rows: list[int]
    targets: list[int]
    owners: list[tuple]
    pads: list[int]

    def mask(self, dtype) -> torch.Tensor:
        """The additive 4D attention mask (rows, 1, width, start + width) in `dtype`."""
        return torch.zeros(self.allowed.shape, dtype=dtype).masked_fill_(~self.allowed, torch.finfo(dtype).min)[:, None]


def row_layout(calls: list[TreeCall], start: int = 0, extra_keys: Sequence[Sequence[int]] = ()) -> RowLayout:
    """Lay `calls` out as left-padded rows feeding their keys from `start` on. `extra_keys[b]`: keys of call b
    whose outputs are kept as well (`keep`), e.g. a prefix's last token for a value head."""
    width = max(len(call) - start for call in calls)
    ids = torch.zeros(len(calls), width, dtype=torch.long)
    positions = torch.zeros(len(calls), width, dtype=torch.long)
    allowed = torch.zeros(len(calls), width, start + width, dtype=torch.bool)
    pads, picks = [], []
    for b, call in enumerate(calls):
        pad = width - (len(call) - start)
        pads.append(pad)
        ids[b, pad:] = torch.tensor(call.tokens[start:])
        positions[b, pad:] = torch.tensor(call.position[start:])
        visible = call.visible(start)
        allowed[b, pad:, :start] = visible[:, :start]
        allowed[b, pad:, start + pad:] = visible[:, start:]
        allowed[b, torch.arange(pad), start + torch.arange(pad)] = True
        picks.append(call.fed_targets(start, len(call)))
    keep = {pad + call.rows[t] - start for call, pad, chosen in zip(calls, pads, picks) for t in chosen}
    keep |= {pad + key - start for keys, pad in zip(extra_keys, pads) for key in keys}
    keep = sorted(keep)
    column = {position: k for k, position in enumerate(keep)}
    rows, targets, owners = [], [], []
    for b, (call, pad, chosen) in enumerate(zip(calls, pads, picks)):
        rows += [b * len(keep) + column[pad + call.rows[t] - start] for t in chosen]
        targets += [call.targets[t] for t in chosen]
        owners += [(b, call.owners[t]) for t in chosen]
    return RowLayout(ids, positions, allowed, keep, rows, targets, owners, pads)


@torch.inference_mode()
def run_rows(model, calls: list[TreeCall], start: int = 0, cache=None, greedy: bool = False) -> list[dict]:
    """One forward call over `calls` as left-padded batch rows (`row_layout`), each feeding its keys from
    `start` on (the keys before it are in `cache`, batch-expanded to the rows); returns {owner: summed
    log-prob} per call ({owner: (sum, greedy)} with `greedy`, see `gather_sums`).

    Left padding ends every row at the same position, so the logit rows kept (the union over rows) stay close
    to the longest row's needs."""
    device = model_device(model)
    layout = row_layout(calls, start)
    with grouped_rows(model):
        out = model(
            input_ids=layout.ids.to(device),
            attention_mask=layout.mask(model.dtype).to(device),
            position_ids=layout.positions.to(device),
            cache=cache,
            use_cache=cache is not None,
            logits_to_keep=torch.tensor(layout.keep or [0], device=device),
        )
    sums = gather_by_owner(out.logits.reshape(-1, out.logits.shape[-1]), layout.rows, layout.targets, layout.owners, greedy)
    results: list[dict] = [{} for _ in calls]
    for (b, owner), value in sums.items():
        results[b][owner] = value
    return results


@torch.inference_mode()
def run_chains(model, chains: list[Sequence[int]], targets: list[list[tuple[int, int, Hashable]]], cache,
               cached: int) -> dict:
    """One forward call of right-padded token chains continuing `cache` (`cached` keys, batch-expanded to the
    chains); targets[b] lists (index in chain b, target token, owner). Returns {owner: summed log-prob}.

    The cache is updated in place (callers that keep the chains' final states read them from it)."""
    device = model_device(model)
    width = max(len(chain) for chain in chains)
    ids = torch.zeros(len(chains), width, dtype=torch.long)
    mask = torch.zeros(len(chains), cached + width, dtype=torch.long)
    mask[:, :cached] = 1
    rows, picked, owners = [], [], []
    for b, chain in enumerate(chains):
        ids[b, : len(chain)] = torch.tensor(list(chain))
        mask[b, cached : cached + len(chain)] = 1
        for k, target, owner in targets[b]:
            rows.append(b * width + k)
            picked.append(target)
            owners.append(owner)
    positions = torch.arange(cached, cached + width).expand(len(chains), width)
    with grouped_rows(model):
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                    cache=cache, use_cache=True)
    return gather_by_owner(out.logits.reshape(-1, out.logits.shape[-1]), rows, picked, owners)


def row_states(cache, calls: list[TreeCall], start: int, row: int, keys: Sequence[int]) -> list[tuple]:
    """(keys, values) per layer, batch 1, of the keys `keys` (in that order) of row `row` of a `run_rows`
    call, read from the cache it filled (`start` keys given before it, then each row's left padding)."""
    pad = max(len(call) - start for call in calls) - (len(calls[row]) - start)
    layers = cache.layers
    columns = torch.tensor([k if k < start else k + pad for k in keys], device=layers[0].keys.device)
    return [(layer.keys[row : row + 1].index_select(2, columns), layer.values[row : row + 1].index_select(2, columns))
            for layer in layers]


def keeps_prefixes(model) -> bool:
    """Whether a kept prefix can serve `model`: every cache layer is a plain full-attention `DynamicLayer` (no
    sliding window, no recurrent or convolution state, no layers sharing keys)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class KeptPrefix:
    """The attention keys/values of ONE text prefix, kept between calls of a scorer (`jet`'s `reuse_prefix`).

    Bounded memory: at most one prefix is held (layers x 2 x key heads x tokens x head size); `keep` replaces
    it, `clear` drops it. It is never handed to a model: `cache(length, rows)` builds a fresh cache holding a
    copy of its first `length` keys for `rows` batch rows, so a call that appends to that cache leaves the
    kept tensors as they were. `usable(model)` drops it when the model object, its dtype or its device is not
    the one it was computed with, and refuses models whose cache is not plain attention (`keeps_prefixes`).
    Tokens are matched exactly (`reusable`), so a changed prefix never meets stale keys.
    `reused_tokens` / `reusing_calls` count what reuse saved over the scorer's life."""

    def __init__(self):
        self.tokens: tuple[int, ...] = ()
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._model = None
        self._supported: tuple | None = None  # (model ref, answer of keeps_prefixes)
        self.reused_tokens = 0
        self.reusing_calls = 0

    def __len__(self):
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer)

    def clear(self) -> None:
        self.tokens, self.layers, self._model = (), [], None

    def keep(self, model, tokens: Sequence[int], layers: list[tuple]) -> None:
        """Hold `layers` ((keys, values) per layer, batch 1, one key per token) as the states of `tokens`."""
        if any(k.shape[0] != 1 or k.shape[2] != len(tokens) or v.shape[:3] != k.shape[:3] for k, v in layers):
            raise ValueError(f"kept states must be batch 1 with {len(tokens)} keys per layer")
        self.tokens, self.layers, self._model = tuple(tokens), list(layers), weakref.ref(model)

    def usable(self, model) -> bool:
        """Whether prefixes can be kept for `model`; a prefix kept for another model, dtype or device is dropped."""
        if self._supported is None or self._supported[0]() is not model:
            self._supported = (weakref.ref(model), keeps_prefixes(model))
        if not self._supported[1]:
            self.clear()
            return False
        if self.layers:
            keys = self.layers[0][0]
            if self._model() is not model or keys.dtype != model.dtype or keys.device != model_device(model):
                self.clear()
        return True

    def reusable(self, prefixes: Sequence[Sequence[int] | None], min_shared: int) -> tuple[int, list[int]]:
        """(length, indices): how many leading kept tokens the call reads, and the prefixes that read them.

        A prefix (None: not a text prefix) can read r = min(common length with the kept tokens, its length - 1)
        tokens: its last token always runs, its logits give the first candidate tokens. Only r >= `min_shared`
        (> 0) counts. One length serves the call: the one that saves the most tokens (length x readers; the
        longer on a tie); every prefix with r at least that long reads it."""
        if not self.tokens or min_shared < 1:
            return 0, []
        reach = [None if p is None else min(common_length(self.tokens, p), len(p) - 1) for p in prefixes]
        lengths = {r for r in reach if r is not None and r >= min_shared}
        if not lengths:
            return 0, []
        best = max(lengths, key=lambda n: (n * sum(r is not None and r >= n for r in reach), n))
        return best, [i for i, r in enumerate(reach) if r is not None and r >= best]

    def cache(self, length: int, rows: int = 1):
        """A fresh transformers cache holding a copy of the first `length` kept keys, repeated over `rows`."""
        from transformers.cache_utils import DynamicCache

        if not 0 < length <= len(self.tokens):
            raise ValueError(f"cannot read {length} keys of a kept prefix of {len(self.tokens)} tokens")
        return DynamicCache(ddp_cache_data=[  # the cache copies the expanded views into tensors of its own
            (k[:, :, :length].expand(rows, -1, -1, -1), v[:, :, :length].expand(rows, -1, -1, -1))
            for k, v in self.layers])


# ---------------------------------------------------------------- bytes

def state_tensors(cache):
    """Every state tensor a transformers cache holds: attention keys/values, convolution and recurrent states."""
    for layer in getattr(cache, "layers", None) or []:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                yield tensor
        for name in ("conv_states", "recurrent_states"):
            for tensor in (getattr(layer, name, None) or {}).values():
                if isinstance(tensor, torch.Tensor):
                    yield tensor


def state_bytes(cache) -> int:
    """Bytes of every state tensor of a transformers cache (`Usage.cache_bytes` of `jet`'s schedules)."""
    return sum(t.numel() * t.element_size() for t in state_tensors(cache))


def live_bytes(tensors, seen: set | None = None) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one parent, e.g. broadcast rows, count once);
    storages already in `seen` are skipped, and the new ones added to it."""
    seen = set() if seen is None else seen
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total
