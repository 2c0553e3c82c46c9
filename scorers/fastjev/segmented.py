"""The segmented schedule (T as in the paper; works on attention-only and hybrid models).

The prefix runs once with every layer; its cache is the read-only anchor. Segments (chains of fed trie
nodes ending at forks or fed leaves) run parent first; sibling segments share one call: internal
segments only with equal lengths (their final states are kept, so no padding may enter a recurrence),
leaf segments right-padded (padding after a leaf's last token changes none of its outputs, and leaf
states are dropped). A parent's state is released once all its children ran (Share/Drop); with
share=False every branch copies its initial state and every final state is kept (Copy/Keep).
On `sdpa` models the rows' attention runs as grouped-query SDPA (`attention.py`): the context keys are
never repeated per query head.
"""

from __future__ import annotations

import torch

from jetgym.scorers.execution import Scored, _device, _gather_sums

from .anchor import BranchCache, StateLedger, snapshot_prefix
from .attention import grouped_rows
from .pruning import skipping
from .trie import ROOT, CandidateTrie, sibling_groups


@torch.inference_mode()
def prefix_anchor(model, prefix, trie: CandidateTrie, scored: Scored, node_lp: list[float]):
    """Prefix forward with every layer: the anchor state, and the root nodes' log-probs."""
    device = _device(model)
    out = model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=True, logits_to_keep=1)
    roots = trie.roots
    sums = _gather_sums(out.logits[0, -1:], [0] * len(roots), [trie.token[r] for r in roots], list(range(len(roots))), len(roots))
    for r, value in zip(roots, sums):
        node_lp[r] = value
    scored.work.prefix_tokens += len(prefix)
    scored.work.forward_calls += 1
    return snapshot_prefix(out.cache, len(prefix))


@torch.inference_mode()
def score_segmented(model, prefix, trie: CandidateTrie, max_batch_tokens: int, skip=(), share: bool = True) -> Scored:
    device = _device(model)
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
            width = max(len(segments[s].nodes) for s in group)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), length + width, dtype=torch.long)
            mask[:, :length] = 1
            rows, targets, owners = [], [], []
            for b, s in enumerate(group):
                nodes = segments[s].nodes
                ids[b, : len(nodes)] = torch.tensor([trie.token[n] for n in nodes])
                mask[b, length : length + len(nodes)] = 1
                for k, node in enumerate(nodes):
                    for child in trie.children[node]:
                        rows.append(b * width + k)
                        targets.append(trie.token[child])
                        owners.append(child)
            cache = BranchCache(states[parent], len(group), share, keep=internal or not share)
            positions = torch.arange(length, length + width).expand(len(group), width)
            with skipping(model, skip), grouped_rows(model):
                out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                            cache=cache, use_cache=True)
            local = sorted(set(owners))
            slot = {node: i for i, node in enumerate(local)}
            sums = _gather_sums(out.logits.reshape(-1, out.logits.shape[-1]), rows, targets, [slot[o] for o in owners], len(local))
            for node, value in zip(local, sums):
                node_lp[node] = value
            scored.work.candidate_tokens += sum(len(segments[s].nodes) for s in group)
            scored.work.forward_calls += 1
            del out
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
