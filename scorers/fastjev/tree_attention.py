"""Tree attention: each query of a packed call attends to its root path only, never to a dense N x N mask.

Every key (cached or new) has a parent key; a query sees its ancestors and itself. The queries are cut into
blocks (`blocks.py`); a block's queries share one context and are causal among themselves, so a block needs
the keys context + block and a mask `key < context + min(query + 1, length)`. Per bucket of blocks and layer:
one gather of keys and one `grouped_sdpa` (`jetgym.scorers.attention`). Attention work is the sum over queries of their
visible keys (plus bucket padding) instead of queries x all keys.

Used through `tree_attention(model)`, which switches the model's attention implementation for one call and
passes the layout as the `tree_layout` keyword (transformers forwards extra keywords to attention).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface

from jetgym.scorers.attention import grouped_sdpa, use_attention

from .blocks import BLOCK, buckets, query_blocks, span

NAME = "jetgym_tree"


@dataclass(frozen=True)
class Bucket:
    queries: torch.Tensor  # (S, Q) query rows, padded by repeating a block's last query
    keys: torch.Tensor  # (S, K) key indices, padded with key 0
    mask: torch.Tensor  # (S, 1, Q, K) bool, True = visible
    rows: torch.Tensor  # flat indices into (S * Q) of the real queries
    targets: torch.Tensor  # their query rows, aligned with `rows`


@dataclass(frozen=True)
class TreeLayout:
    queries: int
    buckets: tuple[Bucket, ...]


def build_layout(parents: list[int], first_query: int, device, block: int = BLOCK) -> TreeLayout:
    """Index and mask tensors for the call whose queries are the keys from first_query on."""
    out = []
    for width, members in buckets(query_blocks(parents, first_query, block)).items():
        keys_per_block = span(members)
        queries, keys, limits, rows, targets = [], [], [], [], []
        for s, (context, start, end) in enumerate(members):
            length = end - start
            own = list(range(start, end))
            queries.append([q - first_query for q in own] + [end - 1 - first_query] * (width - length))
            keys.append(context + own + [0] * (keys_per_block - len(context) - length))
            limits.append([len(context) + min(i + 1, length) for i in range(width)])
            rows.extend(s * width + i for i in range(length))
            targets.extend(q - first_query for q in own)
        mask = torch.arange(keys_per_block)[None, None, :] < torch.tensor(limits)[:, :, None]
        out.append(
            Bucket(
                torch.tensor(queries, device=device),
                torch.tensor(keys, device=device),
                mask[:, None].to(device),
                torch.tensor(rows, device=device),
                torch.tensor(targets, device=device),
            )
        )
    return TreeLayout(len(parents) - first_query, tuple(out))


def tree_attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling=None,
    tree_layout: TreeLayout | None = None,
    **kwargs,
):
    """Attention over root paths; query (1, H, N, D), key/value (1, KV, keys, D) -> ((1, N, H, D), None)."""
    if tree_layout is None:
        raise RuntimeError(f"attention '{NAME}' needs a tree_layout (use scorers.fastjev.tree_attention)")
    if kwargs.get("softcap") is not None or kwargs.get("sliding_window") is not None:
        raise NotImplementedError("tree attention supports plain softmax attention only (no softcap or sliding window)")
    heads, width = query.shape[1], value.shape[3]
    out = query.new_empty(tree_layout.queries, heads, width)
    for bucket in tree_layout.buckets:
        qs = query[0][:, bucket.queries].transpose(0, 1)  # (S, H, Q, D)
        ks = key[0][:, bucket.keys].transpose(0, 1)  # (S, KV, K, D)
        vs = value[0][:, bucket.keys].transpose(0, 1)
        o = grouped_sdpa(qs, ks, vs, bucket.mask, scaling)  # (S, Q, H, D)
        out[bucket.targets] = o.reshape(-1, heads, width)[bucket.rows]
    return out[None], None


AttentionInterface.register(NAME, tree_attention_forward)


def unsupported_reason(config) -> str | None:
    """Why tree attention cannot run a model (logit softcapping, sliding-window layers), or None."""
    text = getattr(config, "text_config", None) or config
    if getattr(text, "attn_logit_softcapping", None):
        return "attention logit softcapping"
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        sliding = any("sliding" in t for t in layer_types)
    else:
        sliding = getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True)
    return "sliding-window attention" if sliding else None


def tree_attention(model):
    """Route the model's attention through `tree_attention_forward` for the duration of one call."""
    return use_attention(model, NAME)
