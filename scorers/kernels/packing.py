"""How items of given sizes fill calls of a token capacity, and runs of questions whose prefixes begin alike."""

from __future__ import annotations

from typing import Sequence


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


def shared_prefix_groups(
    prefixes: Sequence[Sequence[int]], min_shared: int, shareable: Sequence[bool] | None = None
) -> list[tuple[list[int], int]]:
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


def shared_rows(
    prefixes: Sequence[Sequence[int]],
    own: Sequence[int],
    capacity: int,
    min_shared: int,
    shareable: Sequence[bool] | None = None,
) -> tuple[list[tuple[list[int], int, int]], list[int]]:
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
