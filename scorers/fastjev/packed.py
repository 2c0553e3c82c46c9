"""The packed schedule (attention-only models): every fed trie node of a question in ONE forward call.

A `TrieCall` holds tokens tagged (block, parent slot, position): a token sees earlier prefix tokens of
its own block (question) and its ancestor-or-self trie nodes, nothing else; this generalizes
`scorers.execution.PackedCall` (whose candidates are chains) to trees. Several questions share a call
(block-diagonal). Without pruning, prefixes and nodes share one call; with pruning the prefixes run
first with every layer (their cache is the anchor), then the nodes run over it with the mask's layers
skipped. A question whose trie exceeds max_batch_tokens splits into calls by root subtrees (a root
subtree is never split).
"""

from __future__ import annotations

import torch

from scorers.execution import Scored, _device, _gather_sums, _groups

from .anchor import BranchCache, snapshot_prefix
from .pruning import skipping
from .readout import SequenceLogLikelihood
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
    def run(self, model, cached: "TrieCall | None" = None, anchor=None, use_cache: bool = False):
        """One forward call: the log-prob of every (question, node) target, and the cache when asked."""
        device = _device(model)
        keep = sorted(set(self.rows))
        row_of = {r: i for i, r in enumerate(keep)}
        cache = BranchCache(anchor, 1, share=True, keep=False) if anchor is not None else None
        first = len(cached) if cached is not None else 0
        layout = build_layout(self.parents(cached), first, device)
        with tree_attention(model):
            out = model(
                input_ids=torch.tensor([self.tokens], device=device),
                position_ids=torch.tensor([self.position], device=device),
                cache=cache,
                use_cache=use_cache or cache is not None,
                logits_to_keep=torch.tensor(keep or [0], device=device),
                tree_layout=layout,
            )
        result = {}
        if self.rows:
            owners = sorted(set(self.owners))
            slot = {o: i for i, o in enumerate(owners)}
            sums = _gather_sums(out.logits[0], [row_of[r] for r in self.rows], self.targets,
                                [slot[o] for o in self.owners], len(owners))
            result = dict(zip(owners, sums))
        return result, (out.cache if use_cache and anchor is None else None)


def packed_cost(prefix, trie: CandidateTrie) -> int:
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

    def run_prefix(self, model):
        call = TrieCall()
        for q, (prefix, trie) in enumerate(self.items):
            call.add_prefix(q, prefix, trie, q)
        self.root_lp, cache = call.run(model, use_cache=True)
        self.prefix_call = call
        self.anchor = snapshot_prefix(cache, len(call))

    def node_chunks(self) -> list[list[tuple[int, list[int]]]]:
        """Calls of (question, nodes): whole questions together when they fit, else root subtrees of one."""
        fed_total = sum(len(t.fed()) for _, t in self.items)
        if fed_total <= self.capacity or len(self.items) > 1:
            return [[(q, t.fed()) for q, (_, t) in enumerate(self.items)]]
        trie = self.items[0][1]
        sizes = trie.subtree_sizes()
        owner = {}
        for node in range(len(trie)):
            owner[node] = node if trie.parent[node] == ROOT else owner[trie.parent[node]]
        chunks = []
        for group in _groups([(r, sizes[r]) for r in trie.roots if sizes[r]], self.capacity):
            members = set(group)
            chunks.append([(0, [n for n in trie.fed() if owner[n] in members])])
        return chunks

    def run_nodes(self, model, skip=()) -> tuple[list[list[float]], int]:
        """Candidate logits per question and the number of node calls."""
        results = dict(self.root_lp)
        chunks = self.node_chunks()
        for chunk in chunks:
            call = TrieCall()
            for q, nodes in chunk:
                call.add_nodes(q, self.items[q][1], nodes, q)
            if not len(call):
                continue
            with skipping(model, skip):
                out, _ = call.run(model, cached=self.prefix_call, anchor=self.anchor)
            results.update(out)
        readout = SequenceLogLikelihood()
        scores = []
        for q, (_, trie) in enumerate(self.items):
            node_lp = [results.get((q, n), 0.0) for n in range(len(trie))]
            scores.append(readout(trie, node_lp))
        return scores, sum(1 for c in chunks if any(nodes for _, nodes in c))


@torch.inference_mode()
def score_packed_many(model, items: list[tuple[tuple[int, ...], CandidateTrie]], max_batch_tokens: int,
                      skip=()) -> list[Scored]:
    """Pack questions into groups of at most max_batch_tokens tokens (an oversized question alone)."""
    results: list[Scored | None] = [None] * len(items)
    costs = [(i, packed_cost(p, t)) for i, (p, t) in enumerate(items)]
    fitting = [(i, c) for i, c in costs if c <= max_batch_tokens]
    groups = _groups(fitting, max_batch_tokens) + [[i] for i, c in costs if c > max_batch_tokens]
    for group in groups:
        members = [items[i] for i in group]
        if not skip and all(c <= max_batch_tokens for i, c in costs if i in group):
            call = TrieCall()
            for q, (prefix, trie) in enumerate(members):
                call.add_prefix(q, prefix, trie, q)
                call.add_nodes(q, trie, trie.fed(), q)
            lp, _ = call.run(model)
            readout = SequenceLogLikelihood()
            for q, i in enumerate(group):
                prefix, trie = members[q]
                scores = readout(trie, [lp.get((q, n), 0.0) for n in range(len(trie))])
                results[i] = Scored(scores)
                results[i].work.prefix_tokens = len(prefix)
                results[i].work.candidate_tokens = len(trie.fed())
                results[i].work.forward_calls = 1
            continue
        packed = PackedGroup(members, max_batch_tokens)
        packed.run_prefix(model)
        scores, calls = packed.run_nodes(model, skip)
        for q, i in enumerate(group):
            prefix, trie = members[q]
            results[i] = Scored(scores[q])
            results[i].work.prefix_tokens = len(prefix)
            results[i].work.candidate_tokens = len(trie.fed())
            results[i].work.forward_calls = 1 + calls
    return results
