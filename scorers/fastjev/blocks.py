"""Query blocks of a tree-attention call (pure Python, no torch; shared by the layout and the cost plan).

Keys form a forest by parent pointers; a query sees its ancestors and itself. The call's queries are cut
into blocks: runs where each key's parent is the key before, at most `block` long. A block sees the root
path of its first key's parent (its context) plus itself, causally. Blocks are bucketed by their length
rounded up to a power of two; a bucket pads every block to its width and to its longest key list.
"""

from __future__ import annotations

BLOCK = 32


def query_blocks(parents: list[int], first_query: int, block: int = BLOCK) -> list[tuple[list[int], int, int]]:
    """(context keys, start, end) per block; keys from first_query on are queries, parents precede children."""
    starts: list[int] = []
    for k in range(first_query, len(parents)):
        if k == first_query or parents[k] != k - 1 or k - starts[-1] >= block:
            starts.append(k)
    blocks = []
    for start, end in zip(starts, starts[1:] + [len(parents)]):
        context, key = [], parents[start]
        while key >= 0:
            context.append(key)
            key = parents[key]
        blocks.append((context[::-1], start, end))
    return blocks


def buckets(blocks) -> dict[int, list]:
    """Blocks grouped by width (length rounded up to a power of two)."""
    by_width: dict[int, list] = {}
    for b in blocks:
        by_width.setdefault(1 << (b[2] - b[1] - 1).bit_length(), []).append(b)
    return dict(sorted(by_width.items()))


def span(members) -> int:
    """Keys per block in a bucket: the longest context + block."""
    return max(len(context) + end - start for context, start, end in members)


def padded_pairs(parents: list[int], first_query: int, block: int = BLOCK) -> int:
    """(query, key) pairs one tree-attention call computes, bucket padding included."""
    return sum(
        len(members) * width * span(members)
        for width, members in buckets(query_blocks(parents, first_query, block)).items()
    )
