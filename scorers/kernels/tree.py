"""Packed forward calls as forests of tokens (`TreeCall`): laid out as left-padded rows with ancestor masks
(`run_rows`), right-padded chains continuing a cache (`run_chains`), and the states of a row read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

from ..attention import grouped_rows
from .accounting import model_device
from .logprobs import gather_by_owner


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
        allowed[b, pad:, start + pad :] = visible[:, start:]
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
    sums = gather_by_owner(
        out.logits.reshape(-1, out.logits.shape[-1]), layout.rows, layout.targets, layout.owners, greedy
    )
    results: list[dict] = [{} for _ in calls]
    for (b, owner), value in sums.items():
        results[b][owner] = value
    return results


@torch.inference_mode()
def run_chains(
    model, chains: list[Sequence[int]], targets: list[list[tuple[int, int, Hashable]]], cache, cached: int
) -> dict:
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
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            cache=cache,
            use_cache=True,
        )
    return gather_by_owner(out.logits.reshape(-1, out.logits.shape[-1]), rows, picked, owners)


def row_states(cache, calls: list[TreeCall], start: int, row: int, keys: Sequence[int]) -> list[tuple]:
    """(keys, values) per layer, batch 1, of the keys `keys` (in that order) of row `row` of a `run_rows`
    call, read from the cache it filled (`start` keys given before it, then each row's left padding)."""
    pad = max(len(call) - start for call in calls) - (len(calls[row]) - start)
    layers = cache.layers
    columns = torch.tensor([k if k < start else k + pad for k in keys], device=layers[0].keys.device)
    return [
        (layer.keys[row : row + 1].index_select(2, columns), layer.values[row : row + 1].index_select(2, columns))
        for layer in layers
    ]
