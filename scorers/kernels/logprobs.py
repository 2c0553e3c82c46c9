"""Summed log-probs of target tokens per owner, computed on the device (only the sums leave it)."""

from __future__ import annotations

from typing import Hashable

import torch


NORMALIZER_ROWS = 256  # logits rows normalized at a time


def gather_sums(
    logits: torch.Tensor, rows: list[int], targets: list[int], owners: list[int], n: int, greedy: bool = False
) -> list:
    """Sum of log_softmax(logits[row])[target] per owner (0..n-1); only the n sums leave the device.

    Normalized a chunk of rows at a time (no log_softmax copy of a many-row vocabulary tensor), as
    log_softmax does: (logit - max) - log(sum(exp(logits - max))), the picked values combined in float64.
    `greedy`: each value is a pair (sum, whether every target of the owner is its row's argmax, the first index
    on ties as `torch.argmax` picks it)."""
    device, logits = logits.device, logits.float()
    peak = logits.amax(dim=-1)
    log_total = torch.cat(
        [
            (chunk - top[:, None]).exp_().sum(dim=-1).log_()
            for chunk, top in zip(logits.split(NORMALIZER_ROWS), peak.split(NORMALIZER_ROWS))
        ]
    )
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


def gather_by_owner(
    logits: torch.Tensor, rows: list[int], targets: list[int], owners: list[Hashable], greedy: bool = False
) -> dict:
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
