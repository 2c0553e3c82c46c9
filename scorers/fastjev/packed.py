"""The packed schedule (attention-only models): every fed trie node of a question in ONE forward call.

A `TrieCall` holds tokens tagged (block, parent slot, position): a token sees earlier prefix tokens of
its own block (question) and its ancestor-or-self trie nodes, nothing else (tree attention, see
`tree_attention.py`); this generalizes `jetgym.scorers.execution.PackedCall` (whose candidates are chains) to
trees. Several questions share a call. Without pruning, prefixes and nodes share one call; with pruning
the prefixes run first with every layer (their cache is the anchor), then the nodes run over it with the
mask's layers skipped. Nodes beyond max_batch_tokens run as further calls over the grown cache (a call
holds at most max_batch_tokens nodes, parents before children).
"""

from __future__ import annotations

import torch

from jetgym.scorers.execution import Scored, _device, _gather_sums, _groups

from .anchor import BranchCache, StateLedger, snapshot_prefix
from .pruning import skipping
from .tree_attention import build_layout, tree_attention
from .trie import ROOT, CandidateTrie


class TrieCall:
    """Tokens of one packed call; `up` is the call slot of a node's parent (-1 for root nodes and prefix tokens)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.block: list[int] = []
        self.position: list[int] = []
        self.up: list[int] = []
        self.is_node: list[bool] = []
        self.rows: list[int] = []
        self.targets: list[int] = []
        self.owners: list[tuple[int, int]] = []  # (question, node)

    def __len__(self):
        return len(self.tokens)

    def add_prefix(self, block: int, prefix, trie: CandidateTrie | None, question: int):
        for position, token in enumerate(prefix):
            self._append(token, block, position, -1, False)
        if trie is not None:  # the prefix's last logits predict the root nodes
            for r in trie.roots:
                self.rows.append(len(self.tokens) - 1)
                self.targets.append(trie.token[r])
                self.owners.append((question, r))

    def add_nodes(self, block: int, trie: CandidateTrie, nodes, question: int):
        slot = {}
        for node in nodes:
            up = trie.parent[node]
            slot[node] = self._append(trie.token[node], block, trie.position[node], slot.get(up, -1) if up != ROOT else -1, True)
            for child in trie.children[node]:
                self.rows.append(slot[node])
                self.targets.append(trie.token[child])
                self.owners.append((question, child))

    def _append(self, token, block, position, up, is_node) -> int:
        self.tokens.append(token)
        self.block.append(block)
        self.position.append(position)
        self.up.append(up)
        self.is_node.append(is_node)
        return len(self.tokens) - 1

    def parents(self, cached: "TrieCall | None" = None) -> list[int]:
        """Parent key of every key (cached call first, then this call): a prefix token's is the token before it
        in its block, a root node's the last prefix token of its block, another node's its parent node."""
        parents, last = [], {}
        for call, offset in ((cached, 0), (self, len(cached) if cached is not None else 0)):
            if call is None:
                continue
            for i in range(len(call)):
                if not call.is_node[i]:
                    parents.append(last.get(call.block[i], -1))
                    last[call.block[i]] = offset + i
                else:
                    parents.append(offset + call.up[i] if call.up[i] >= 0 else last[call.block[i]])
        return parents

    @torch.inference_mode()
    def run(self, model, cached: "TrieCall | None" = None, anchor=None, keep: bool = False, start: int = 0,
            end: int | None = None):
        """One forward call over slots [start, end) on `anchor` (the cached call and slots before start):
        the log-prob of every (question, node) target predicted in the slice, and the grown state if `keep`."""
        end = len(self) if end is None else end
        device = _device(model)
        picks = [i for i, r in enumerate(self.rows) if start <= r < end]
        rows = sorted({self.rows[i] for i in picks})
        row_of = {r: i for i, r in enumerate(rows)}
        cache = BranchCache(anchor, 1, share=True, keep=keep) if anchor is not None else None
        first = (len(cached) if cached is not None else 0) + start
        layout = build_layout(self.parents(cached)[: first + end - start], first, device)
        with tree_attention(model):
            out = model(
                input_ids=torch.tensor([self.tokens[start:end]], device=device),
                position_ids=torch.tensor([self.position[start:end]], device=device),
                cache=cache,
                use_cache=keep or cache is not None,
                logits_to_keep=torch.tensor([r - start for r in rows] or [0], device=device),
                tree_layout=layout,
            )
        result = {}
        if picks:
            owners = sorted({self.owners[i] for i in picks})
            slot = {o: i for i, o in enumerate(owners)}
            sums = _gather_sums(out.logits[0], [row_of[self.rows[i]] for i in picks], [self.targets[i] for i in picks],
                                [slot[self.owners[i]] for i in picks], len(owners))
            result = dict(zip(owners, sums))
        if not keep:
            return result, None
        length = first + end - start
        return result, (cache.row_state(0, length) if cache is not None else snapshot_prefix(out.cache, length))


def packed_tokens(prefix, trie: CandidateTrie) -> int:
    """Tokens of a question's single packed call: prefix + fed nodes."""
    return len(prefix) + len(trie.fed())


class PackedGroup:
    """Questions scored together. `run_prefix` once (all layers), then `run_nodes(skip)` any number of times
    (calibration reuses one prefix pass for every skipped layer)."""

    def __init__(self, items: list[tuple[tuple[int, ...], CandidateTrie]], max_batch_tokens: int):
        self.items = items
        self.capacity = max_batch_tokens
        self.prefix_call = None
        self.anchor = None
        self.root_lp: dict = {}
        self.ledger = StateLedger()  # peak bytes of the states kept between calls

    def run_prefix(self, model):
        call = TrieCall()
        for q, (prefix, trie) in enumerate(self.items):
            call.add_prefix(q, prefix, trie, q)
        self.root_lp, self.anchor = call.run(model, keep=True)
        self.prefix_call = call
        self.ledger.observe([self.anchor])

    def run_nodes(self, model, skip=()) -> tuple[list[list[float]], int]:
        """Candidate logits per question and the number of node calls: the fed nodes of every question in
        calls of at most max_batch_tokens (parents first); each call attends to the keys before it."""
        call = TrieCall()
        for q, (_, trie) in enumerate(self.items):
            call.add_nodes(q, trie, trie.fed(), q)
        results, anchor = dict(self.root_lp), self.anchor
        starts = range(0, len(call), self.capacity)
        for start in starts:
            end = min(start + self.capacity, len(call))
            with skipping(model, skip):
                out, anchor = call.run(model, self.prefix_call, anchor, keep=end < len(call), start=start, end=end)
            results.update(out)
            if anchor is not None:
                self.ledger.observe([anchor])
        scores = [trie.path_sums([results.get((q, n), 0.0) for n in range(len(trie))]) for q, (_, trie) in enumerate(self.items)]
        return scores, len(starts)


@torch.inference_mode()
def score_packed_many(model, items: list[tuple[tuple[int, ...], CandidateTrie]], max_batch_tokens: int,
                      skip=()) -> list[Scored]:
    """Pack questions into groups of at most max_batch_tokens tokens (an oversized question alone)."""
    results: list[Scored | None] = [None] * len(items)
    costs = [(i, packed_tokens(p, t)) for i, (p, t) in enumerate(items)]
    fitting = [(i, c) for i, c in costs if c <= max_batch_tokens]
    groups = _groups(fitting, max_batch_tokens) + [[i] for i, c in costs if c > max_batch_tokens]
    for group in groups:
        members = [items[i] for i in group]
        if skip or any(costs[i][1] > max_batch_tokens for i in group):
            packed = PackedGroup(members, max_batch_tokens)
            packed.run_prefix(model)
            scores, node_calls = packed.run_nodes(model, skip)
            calls, kept = 1 + node_calls, packed.ledger.peak
        else:  # prefixes and nodes in one call, nothing kept
            call = TrieCall()
            for q, (prefix, trie) in enumerate(members):
                call.add_prefix(q, prefix, trie, q)
                call.add_nodes(q, trie, trie.fed(), q)
            lp, _ = call.run(model)
            scores = [trie.path_sums([lp.get((q, n), 0.0) for n in range(len(trie))]) for q, (_, trie) in enumerate(members)]
            calls, kept = 1, 0
        for q, i in enumerate(group):
            prefix, trie = members[q]
            results[i] = Scored(scores[q])
            results[i].work.prefix_tokens = len(prefix)
            results[i].work.candidate_tokens = len(trie.fed())
            results[i].work.forward_calls = calls
            results[i].work.cache_bytes = kept
    return results
