"""The segmented schedule (T as in the paper; works on attention-only and hybrid models).

The prefix runs once with every layer; its cache is the read-only anchor. Segments (chains of fed trie
nodes ending at forks or fed leaves) run parent first; sibling segments share one call: internal
segments only with equal lengths (their final states are kept, so no padding may enter a recurrence),
leaf segments right-padded (padding after a leaf's last token changes none of its outputs, and leaf
states are dropped). A parent's state is released once all its children ran (Share/Drop); with
share=False every branch copies its initial state and every final state is kept (Copy/Keep).
Each call is `kernels.run_chains`: on `sdpa` models the rows' attention runs as grouped-query SDPA
(`jetgym.scorers.attention`), so the context keys are never repeated per query head.
"""

from __future__ import annotations

import torch

from jetgym.scorers.kernels.accounting import Scored
from jetgym.scorers.kernels.prefix import prefix_call
from jetgym.scorers.kernels.tree import run_chains

from .anchor import BranchCache, StateLedger, snapshot_prefix
from .pruning import skipping
from .trie import ROOT, CandidateTrie, sibling_groups


def prefix_anchor(model, prefix, trie: CandidateTrie, scored: Scored, node_lp: list[float]):
    """Prefix forward with every layer (`kernels.prefix_call`): the anchor state, and the root nodes' log-probs."""
    cache, sums = prefix_call(model, prefix, [trie.token[r] for r in trie.roots], scored.work)
    for r, value in zip(trie.roots, sums):
        node_lp[r] = value
    return snapshot_prefix(cache, len(prefix))


@torch.inference_mode()
def score_segmented(model, prefix, trie: CandidateTrie, max_batch_tokens: int, skip=(), share: bool = True) -> Scored:
    scored = Scored([])
    node_lp = [0.0] * len(trie)
    anchor = prefix_anchor(model, prefix, trie, scored, node_lp)
    segments = trie.segments()
    kids: dict[int, list[int]] = {}
    for s, segment in enumerate(segments):
        kids.setdefault(segment.parent, []).append(s)
    states = {ROOT: anchor}
    ledger = StateLedger()
    ledger.observe(states.values())
    stack = [ROOT]
    while stack:
        parent = stack.pop()
        length = states[parent].length
        for group, internal in sibling_groups(segments, kids.get(parent, []), max_batch_tokens):
            chains = [[trie.token[n] for n in segments[s].nodes] for s in group]
            targets = [
                [
                    (k, trie.token[child], child)
                    for k, node in enumerate(segments[s].nodes)
                    for child in trie.children[node]
                ]
                for s in group
            ]
            cache = BranchCache(states[parent], len(group), share, keep=internal or not share)
            with skipping(model, skip):
                sums = run_chains(model, chains, targets, cache, length)
            for node, value in sums.items():
                node_lp[node] = value
            scored.work.candidate_tokens += sum(len(chain) for chain in chains)
            scored.work.forward_calls += 1
            if internal or not share:
                for b, s in enumerate(group):
                    states[s] = cache.row_state(b, length + len(segments[s].nodes))
            ledger.observe(states.values(), [cache])
            del cache
        if share:
            del states[parent]  # all its children ran: nothing depends on it any more
        stack += [s for s in reversed(kids.get(parent, [])) if segments[s].internal]
    scored.logprobs = trie.path_sums(node_lp)
    scored.work.cache_bytes = ledger.peak
    scored.peak_recurrent_bytes = ledger.peak_recurrent
    return scored
