"""`auto`: pick the execution plan with the least estimated cost (no torch).

Plans: `packed` (trie, attention-only), `segmented` (trie), `flat` (no sharing: candidates in padded
batches from the anchor, i.e. the S+P path). Without T only `flat`-shaped plans exist.
Estimated cost, in token-equivalents of one full forward (the prefix call is common to all and left out):
    calls * call_overhead_tokens + fed tokens (padding included) + pair_cost * attention (query, key) pairs
- calls: forward calls after the prefix call (packed without pruning shares the prefix call: 0 more);
- pairs: attention (query, key) pairs computed, padding included: a padded batch row sees its context and
  its whole width; a packed call computes its tree-attention buckets (`blocks.padded_pairs`);
- pair_cost = 4 * hidden * attention_layers / (2 * parameters): the flops of one pair over those of one token.
The scorer's default call_overhead_tokens (32) was measured on the embedded model on this project's 2-core CPU.
`python -m benchmarks.fastjev` fits both constants (call cost and pair cost) to plan timings on one half of its grid and
judges `auto` on the other half (docs/benchmarks.md, fastjev section); other hardware may want other values.
Hybrid models have no packed plan (recurrent layers cannot use a tree mask).
"""

from __future__ import annotations

from .blocks import padded_pairs
from .trie import ROOT, CandidateTrie, sibling_groups


def segmented_plan_cost(trie: CandidateTrie, capacity: int, call_tokens: float, pair_cost: float) -> float:
    segments = trie.segments()
    kids: dict[int, list[int]] = {}
    for s, segment in enumerate(segments):
        kids.setdefault(segment.parent, []).append(s)
    start = {-1: trie.prefix_length}
    for s, segment in enumerate(segments):
        start[s] = start[segment.parent] + len(segment.nodes)
    cost = 0.0
    for parent, children in kids.items():
        for group, _ in sibling_groups(segments, children, capacity):
            width = max(len(segments[s].nodes) for s in group)
            tokens = len(group) * width
            cost += call_tokens + tokens + pair_cost * tokens * (start[parent] + width)
    return cost


def packed_plan_cost(trie: CandidateTrie, capacity: int, call_tokens: float, pair_cost: float, pruned: bool) -> float:
    fed = trie.fed()
    if not fed:
        return 0.0
    calls = (0 if not pruned and len(fed) + trie.prefix_length <= capacity else 1) + len(fed) // (capacity + 1)
    return calls * call_tokens + len(fed) + pair_cost * padded_pairs(node_parents(trie), trie.prefix_length)


def node_parents(trie: CandidateTrie) -> list[int]:
    """Parent keys of the prefix tokens (a chain) followed by the fed nodes, as a packed call lays them out."""
    fed = trie.fed()
    key = {node: trie.prefix_length + i for i, node in enumerate(fed)}
    parents = list(range(-1, trie.prefix_length - 1))
    return parents + [trie.prefix_length - 1 if trie.parent[n] == ROOT else key[trie.parent[n]] for n in fed]


def plan_costs(
    shared: CandidateTrie | None,
    flat: CandidateTrie,
    capacity: int,
    call_tokens: float,
    pair_cost: float,
    attention_only: bool,
    pruned: bool,
) -> dict[str, float]:
    costs = {"flat": segmented_plan_cost(flat, capacity, call_tokens, pair_cost)}
    if shared is not None:
        costs["segmented"] = segmented_plan_cost(shared, capacity, call_tokens, pair_cost)
        if attention_only:
            costs["packed"] = packed_plan_cost(shared, capacity, call_tokens, pair_cost, pruned)
    return costs


def choose(costs: dict[str, float]) -> str:
    """The cheapest plan; ties prefer packed, then flat, then segmented."""
    order = {"packed": 0, "flat": 1, "segmented": 2}
    return min(costs, key=lambda name: (costs[name], order[name]))


def pair_cost_of(config) -> float:
    text = getattr(config, "text_config", None) or config
    layer_types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    attention_layers = sum(1 for t in layer_types if "attention" in t and t != "linear_attention")
    hidden = getattr(text, "num_attention_heads", 1) * (
        getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    )
    layers = text.num_hidden_layers
    params = (
        layers * (4 * text.hidden_size**2 + 3 * text.hidden_size * text.intermediate_size)
        + text.vocab_size * text.hidden_size
    )
    return 4 * hidden * attention_layers / (2 * params)
