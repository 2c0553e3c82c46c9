"""T: the candidate trie. Pure Python (no torch).

A node is one token occurrence after the shared context, keyed by (parent node, token, position);
positions come from the unmerged layout (prefix length + depth), so a merged node sees exactly the
history and position it has in separate evaluation. Each candidate keeps its own path of node ids
(duplicates stay separate entries). Only nodes with children are *fed*: a node's logits predict its
children's tokens; the root's children are predicted by the prefix's last logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROOT = -1


@dataclass(frozen=True)
class Segment:
    """A chain of fed nodes run as one piece: it ends at a fork (>= 2 fed children) or a fed leaf."""

    nodes: tuple[int, ...]
    parent: int  # segment id, or ROOT for the prefix anchor
    internal: bool  # has descendant segments, so its final state must be kept


@dataclass
class CandidateTrie:
    prefix_length: int
    token: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    position: list[int] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)
    paths: list[tuple[int, ...]] = field(default_factory=list)

    @classmethod
    def build(cls, prefix_length: int, continuations, share: bool = True) -> "CandidateTrie":
        """share=False gives the flat layout (no T): every candidate its own path, duplicates included."""
        trie = cls(prefix_length)
        index: dict[tuple, int] = {}
        for c, tokens in enumerate(continuations):
            node, path = ROOT, []
            for depth, token in enumerate(tokens):
                position = prefix_length + depth
                key = (node, token, position) if share or node != ROOT else (node, token, position, c)
                child = index.get(key)
                if child is None:
                    child = index[key] = trie._add(node, token, position)
                node = child
                path.append(node)
            trie.paths.append(tuple(path))
        return trie

    def _add(self, parent: int, token: int, position: int) -> int:
        node = len(self.token)
        self.token.append(token)
        self.parent.append(parent)
        self.position.append(position)
        self.children.append([])
        (self.roots if parent == ROOT else self.children[parent]).append(node)
        return node

    def path_sums(self, node_logprobs) -> list[float]:
        """The JET readout: each candidate's log-likelihood, the sum of its path's node log-probs (float64)."""
        return [float(sum(node_logprobs[n] for n in path)) for path in self.paths]

    def __len__(self) -> int:
        return len(self.token)

    @property
    def logical_tokens(self) -> int:
        """Unique token occurrences (trie nodes)."""
        return len(self.token)

    @property
    def unmerged_tokens(self) -> int:
        return sum(len(p) for p in self.paths)

    def fed(self) -> list[int]:
        """Nodes whose logits are needed (they have children), parents before children."""
        return [n for n in range(len(self)) if self.children[n]]

    def fed_children(self, node: int) -> list[int]:
        return [c for c in self.children[node] if self.children[c]]

    def segments(self) -> list[Segment]:
        """Segments of fed nodes in creation order (a parent segment precedes its children)."""
        chains: list[list[int]] = []
        parents: list[int] = []
        segment_of: dict[int, int] = {}
        for node in self.fed():
            up = self.parent[node]
            if up != ROOT and len(self.fed_children(up)) == 1:
                segment_of[node] = segment_of[up]
                chains[segment_of[node]].append(node)
            else:
                segment_of[node] = len(chains)
                chains.append([node])
                parents.append(ROOT if up == ROOT else segment_of[up])
        return [
            Segment(tuple(chain), parent, bool(self.fed_children(chain[-1]))) for chain, parent in zip(chains, parents)
        ]


def sibling_groups(segments, kids: list[int], capacity: int) -> list[tuple[list[int], bool]]:
    """Calls for one parent's child segments: (segment ids, keep final states)."""
    groups = []
    by_length: dict[int, list[int]] = {}
    for s in kids:
        if segments[s].internal:
            by_length.setdefault(len(segments[s].nodes), []).append(s)
    for length, same in by_length.items():
        step = max(1, capacity // length)
        groups += [(same[i : i + step], True) for i in range(0, len(same), step)]
    leaves = sorted((s for s in kids if not segments[s].internal), key=lambda s: -len(segments[s].nodes))
    current: list[int] = []
    for s in leaves:
        if current and (len(current) + 1) * len(segments[current[0]].nodes) > capacity:
            groups.append((current, False))
            current = []
        current.append(s)
    if current:
        groups.append((current, False))
    return groups
