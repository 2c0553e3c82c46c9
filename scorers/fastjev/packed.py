"""The packed schedule (attention-only models): every fed trie node of a question in ONE forward call.

The call is a `kernels.tree.TreeCall`: each question's prefix is a chain and its fed trie nodes hang from the
prefix's last token (a node's parent key is its trie parent's), so a token sees its own question's prefix
and its ancestor-or-self trie nodes, nothing else; it runs as tree attention (`tree_attention.py`) in one
batch row. Several questions share a call, and neighbouring questions whose prefixes begin with at least
`min_shared` common tokens share that part once (common prefix -> each question's own prefix tail -> its
trie; `kernels.packing.shared_rows`). Without pruning, prefixes and nodes share one call; with pruning the prefixes
run first with every layer (their cache is the anchor), then the nodes run over it with the mask's layers
skipped. Nodes beyond max_batch_tokens run as further calls over the grown cache (a call holds at most
max_batch_tokens nodes, parents before children).
"""

from __future__ import annotations

import torch

from jetgym.scorers.kernels.accounting import Scored, model_device
from jetgym.scorers.kernels.logprobs import gather_by_owner
from jetgym.scorers.kernels.packing import greedy_groups, shared_rows, split_evenly
from jetgym.scorers.kernels.tree import TreeCall

from .anchor import BranchCache, StateLedger, snapshot_prefix
from .pruning import skipping
from .tree_attention import build_layout, tree_attention
from .trie import ROOT, CandidateTrie


@torch.inference_mode()
def run_tree(model, call: TreeCall, start: int = 0, end: int | None = None, anchor=None, keep: bool = False):
    """One forward call over keys [start, end) of `call` on `anchor` (the `NodeState` of the keys before
    start): {owner: log-prob} of the targets predicted in the slice, and the grown state if `keep`."""
    end = len(call) if end is None else end
    device = model_device(model)
    picks = call.fed_targets(start, end)
    rows = sorted({call.rows[t] for t in picks})
    row_of = {r: i for i, r in enumerate(rows)}
    cache = BranchCache(anchor, 1, share=True, keep=keep) if anchor is not None else None
    layout = build_layout(call.parent[:end], start, device)
    with tree_attention(model):
        out = model(
            input_ids=torch.tensor([call.tokens[start:end]], device=device),
            position_ids=torch.tensor([call.position[start:end]], device=device),
            cache=cache,
            use_cache=keep or cache is not None,
            logits_to_keep=torch.tensor([r - start for r in rows] or [0], device=device),
            tree_layout=layout,
        )
    result = gather_by_owner(
        out.logits[0],
        [row_of[call.rows[t]] for t in picks],
        [call.targets[t] for t in picks],
        [call.owners[t] for t in picks],
    )
    if not keep:
        return result, None
    return result, (cache.row_state(0, end) if cache is not None else snapshot_prefix(out.cache, end))


def packed_tokens(prefix, trie: CandidateTrie) -> int:
    """Tokens of a question's single packed call: prefix + fed nodes."""
    return len(prefix) + len(trie.fed())


def add_prefixes(call: TreeCall, items, members: list[int], common: int, nodes: bool) -> dict[int, int]:
    """The members' common prefix once, then each member's prefix tail (its last key predicts the root nodes)
    and, with `nodes`, its fed trie nodes. Returns each member's last prefix key. Owners are (question, node)."""
    shared = call.add_chain(items[members[0]][0][:common], -1, 0)
    lasts = {}
    for q in members:
        prefix, trie = items[q]
        lasts[q] = last = call.add_chain(prefix[common:], shared, common)
        for r in trie.roots:
            call.predict(last, trie.token[r], (q, r))
        if nodes:
            add_nodes(call, q, trie, last)
    return lasts


def add_nodes(call: TreeCall, q: int, trie: CandidateTrie, last: int) -> None:
    """Question q's fed trie nodes under its last prefix key; each node's logits predict its children."""
    key: dict[int, int] = {}
    for node in trie.fed():
        up = trie.parent[node]
        key[node] = call.add(trie.token[node], last if up == ROOT else key[up], trie.position[node])
        for child in trie.children[node]:
            call.predict(key[node], trie.token[child], (q, child))


class PackedGroup:
    """Questions scored together. `run_prefix` once (all layers), then `run_nodes(skip)` any number of times
    (calibration reuses one prefix pass for every skipped layer). `units`: (members, common prefix length)
    whose common prefix runs once (default: every question alone)."""

    def __init__(self, items: list[tuple[tuple[int, ...], CandidateTrie]], max_batch_tokens: int, units=None):
        self.items = items
        self.capacity = max_batch_tokens
        self.units = units or [([q], len(prefix)) for q, (prefix, _) in enumerate(items)]
        self.call = TreeCall()
        lasts: dict[int, int] = {}
        for members, common in self.units:
            lasts.update(add_prefixes(self.call, items, members, common, nodes=False))
        self.prefix_end = len(self.call)
        for q, (_, trie) in enumerate(items):
            add_nodes(self.call, q, trie, lasts[q])
        self.anchor = None
        self.root_lp: dict = {}
        self.ledger = StateLedger()  # peak bytes of the states kept between calls

    def run_prefix(self, model):
        self.root_lp, self.anchor = run_tree(model, self.call, 0, self.prefix_end, keep=True)
        self.ledger.observe([self.anchor])

    def run_nodes(self, model, skip=()) -> tuple[list[list[float]], int]:
        """Candidate logits per question and the number of node calls: the fed nodes of every question in
        calls of at most max_batch_tokens (parents first); each call attends to the keys before it."""
        results, anchor = dict(self.root_lp), self.anchor
        starts = range(self.prefix_end, len(self.call), self.capacity)
        for start in starts:
            end = min(start + self.capacity, len(self.call))
            with skipping(model, skip):
                out, anchor = run_tree(model, self.call, start, end, anchor, keep=end < len(self.call))
            results.update(out)
            if anchor is not None:
                self.ledger.observe([anchor])
        return _path_sums(self.items, results), len(starts)


def _path_sums(items, node_lp: dict) -> list[list[float]]:
    return [trie.path_sums([node_lp.get((q, n), 0.0) for n in range(len(trie))]) for q, (_, trie) in enumerate(items)]


@torch.inference_mode()
def score_tries_many(
    model, items: list[tuple[tuple[int, ...], CandidateTrie]], max_batch_tokens: int, skip=(), min_shared: int = 0
) -> list[Scored]:
    """FastJEV's packed schedule over (prefix, candidate trie) items (jet's is `execution.score_packed_many`,
    over flat candidate lists). Pack questions into calls of at most max_batch_tokens tokens (an oversized question alone); rows of
    neighbouring questions with at least `min_shared` common prefix tokens run that part once (0: never)."""
    results: list[Scored | None] = [None] * len(items)
    rows, alone = shared_rows([p for p, _ in items], [len(t.fed()) for _, t in items], max_batch_tokens, min_shared)
    groups = [
        [rows[r] for r in group]
        for group in greedy_groups([(r, row[2]) for r, row in enumerate(rows)], max_batch_tokens)
    ]
    groups += [[([i], len(items[i][0]), packed_tokens(*items[i]))] for i in alone]
    for group in groups:
        order = [i for members, _, _ in group for i in members]
        local = {i: q for q, i in enumerate(order)}
        members_items = [items[i] for i in order]
        units = [([local[i] for i in members], common) for members, common, _ in group]
        if skip or sum(tokens for _, _, tokens in group) > max_batch_tokens:
            packed = PackedGroup(members_items, max_batch_tokens, units)
            packed.run_prefix(model)
            scores, node_calls = packed.run_nodes(model, skip)
            calls, kept = 1 + node_calls, packed.ledger.peak
        else:  # prefixes and nodes in one call, nothing kept
            call = TreeCall()
            for members, common in units:
                add_prefixes(call, members_items, members, common, nodes=True)
            lp, _ = run_tree(model, call)
            scores = _path_sums(members_items, lp)
            calls, kept = 1, 0
        for members, common, _ in group:
            for i, share in zip(members, split_evenly(common, len(members))):
                prefix, trie = items[i]
                results[i] = Scored(scores[local[i]])
                results[i].work.prefix_tokens = share + len(prefix) - common
                results[i].work.candidate_tokens = len(trie.fed())
                results[i].work.forward_calls = calls
                results[i].work.cache_bytes = kept
    return results
