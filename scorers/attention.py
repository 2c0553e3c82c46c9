"""Attention implementations switched on for one call, and grouped-query SDPA for batched rows.

transformers' `sdpa` repeats every key/value head once per query head of its group whenever a mask is
given (`repeat_kv`). In a batch of candidate rows over one context that copies the context keys `groups`
times per row and layer; on the embedded model (3 groups) with 64 rows of 8 tokens the copies took as long
as the attention itself. `grouped_sdpa` folds the group's query heads into the query axis instead,
(B, H, q, D) -> (B, KV, groups * q, D) with the mask repeated along it, so keys are read as they are. Masks
are built as for `sdpa` (its mask function is registered under the same name); calls it does not cover (no
group, no mask, extra bias or softcap) go to transformers' `sdpa` unchanged. Every masked row call of the
kernels (`jetgym.scorers.kernels`: `run_rows`, `run_chains`) runs through `grouped_rows`.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

GROUPED = "jetgym_grouped_sdpa"


def grouped_sdpa(query, key, value, mask, scale=None, dropout: float = 0.0):
    """SDPA with each key head read by its group of query heads, keys never repeated: query (B, H, q, D),
    key/value (B, KV, k, D), mask broadcastable to (B, H, q, k) -> (B, q, H, D)."""
    batch, heads, length, _ = query.shape
    kv, keys = key.shape[1], key.shape[2]
    groups = heads // kv  # query head h reads key head h // groups (as repeat_kv lays them out)
    folded = query.reshape(batch, kv, groups * length, query.shape[3])
    mask = mask.expand(batch, heads, length, keys).reshape(batch, kv, groups * length, keys)
    out = F.scaled_dot_product_attention(folded, key, value, attn_mask=mask, dropout_p=dropout, scale=scale)
    out = out.view(batch, kv, groups, length, value.shape[3]).permute(0, 3, 1, 2, 4)
    return out.reshape(batch, length, heads, value.shape[3])


def grouped_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers attention function: `grouped_sdpa` where it applies, transformers' `sdpa` otherwise."""
    extra = kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None
    if query.shape[1] == key.shape[1] or attention_mask is None or extra:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    return grouped_sdpa(query, key, value, attention_mask, scaling, dropout), None


AttentionInterface.register(GROUPED, grouped_sdpa_forward)
AttentionMaskInterface.register(GROUPED, sdpa_mask)


@contextmanager
def use_attention(model, name: str):
    """Route the model's attention through the registered implementation `name` for the duration of one call."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


@contextmanager
def grouped_rows(model):
    """`grouped_sdpa_forward` for a batched-rows call on an `sdpa` model; other implementations stay as they are."""
    if model.config._attn_implementation != "sdpa":
        yield
        return
    with use_attention(model, GROUPED):
        yield
