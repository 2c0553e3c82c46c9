"""S: shared context anchoring. Branch caches that start from one read-only parent state.

A `NodeState` is the per-layer cache after some history (the prefix, or a trie segment): attention
keys/values, or a linear-attention layer's convolution and recurrent states, all with batch 1.
`BranchCache` runs a batch of segments that continue one `NodeState`:
- share=True (S): every row reads the parent's tensors through a broadcast view, no per-branch copy;
  share=False (Copy): the parent's tensors are repeated per row first.
- keep=True: the final states are kept (the segments have descendants); keep=False (leaf segments):
  final recurrent/convolution states and grown keys/values are never stored.
Recurrent updates still run on every executed layer; the kernels update states out of place, and
single-token steps are routed away from the in-place convolution kernel (`record_past`).
Only transformers' `DynamicLayer` (attention) and `LinearAttentionLayer` (Gated DeltaNet style) cache
layers are supported; other layer kinds fail with a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import cache_utils as cu

from jetgym.scorers.kernels.accounting import live_bytes


@dataclass
class NodeState:
    """layers[i] is ("kv", keys, values) or ("linear", conv, recurrent); length counts the history tokens."""

    layers: list[tuple]
    length: int

    def tensors(self):
        for layer in self.layers:
            yield from layer[1:]


def snapshot_prefix(cache, length: int) -> NodeState:
    """The NodeState of a prefix forward's transformers cache (batch 1)."""
    layers = []
    for index, layer in enumerate(cache.layers):
        is_kv = isinstance(layer, cu.CacheLayerMixin)
        is_linear = isinstance(layer, cu.LinearAttentionCacheLayerMixin)
        if is_kv and is_linear or not (is_kv or is_linear) or isinstance(layer, cu.DynamicSlidingWindowLayer):
            raise TypeError(
                f"fastjev cannot anchor cache layer {index} of type {type(layer).__name__}; supported: "
                f"DynamicLayer, LinearAttentionLayer. Use scorer=jet"
            )
        if is_kv:
            layers.append(("kv", layer.keys, layer.values))
        else:
            layers.append(("linear", layer.conv_states[0], layer.recurrent_states[0]))
    return NodeState(layers, length)


def _rows(tensor: torch.Tensor, batch: int, share: bool) -> torch.Tensor:
    if tensor.shape[0] == batch:
        return tensor
    if share:
        return tensor.expand(batch, *tensor.shape[1:])
    return tensor.repeat(batch, *([1] * (tensor.dim() - 1)))


class AnchoredKV(cu.DynamicLayer):
    def __init__(self, keys, values, length: int, batch: int, share: bool, keep: bool):
        super().__init__()
        self.parent = (keys, values)
        self.base = (_rows(keys, batch, share), _rows(values, batch, share))
        self.keys, self.values = self.base
        self.device, self.is_initialized = keys.device, True
        self.length, self.keep, self.updated = length, keep, False

    def update(self, key_states, value_states, *args, **kwargs):
        keys = torch.cat([self.base[0], key_states], dim=-2)
        values = torch.cat([self.base[1], value_states], dim=-2)
        self.updated = True
        if self.keep:
            self.keys, self.values = keys, values
        return keys, values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def row(self, b: int):
        if not (self.keep and self.updated):
            return ("kv", *self.parent)  # skipped layer: the parent's tensors, shared
        return ("kv", self.keys[b : b + 1].clone(), self.values[b : b + 1].clone())

    def live(self):
        return [*self.base, self.keys, self.values]


class AnchoredLinear(cu.LinearAttentionLayer):
    def __init__(self, conv, recurrent, batch: int, share: bool, keep: bool):
        super().__init__()
        self.parent = (conv, recurrent)
        self.conv_states[0] = _rows(conv, batch, share)
        self.recurrent_states[0] = _rows(recurrent, batch, share)
        self.is_conv_states_initialized[0] = self.is_recurrent_states_initialized[0] = True
        self.has_previous_state[0] = True
        self.conv_kernel_size[0] = conv.shape[-1]
        self.device, self.dtype = conv.device, conv.dtype
        self.record_past = True  # single-token steps take the out-of-place convolution path
        self.keep = keep
        self.final: list = [None, None]

    def update_conv_state(self, conv_states, state_idx: int = 0, **kwargs):
        full = torch.cat([self.conv_states[0].to(conv_states.dtype), conv_states], dim=-1)
        if self.keep:
            self.final[0] = full[..., -self.conv_kernel_size[0] :].clone()
        return full

    def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
        if self.keep:
            self.final[1] = recurrent_states
        return recurrent_states

    def row(self, b: int):
        if not self.keep or self.final[1] is None:
            return ("linear", *self.parent)
        return ("linear", self.final[0][b : b + 1].clone(), self.final[1][b : b + 1].clone())

    def live(self):
        return [self.conv_states[0], self.recurrent_states[0], *(t for t in self.final if t is not None)]


class BranchCache(cu.Cache):
    """The cache one batch of sibling segments runs on (see the module docstring)."""

    def __init__(self, anchor: NodeState, batch: int, share: bool, keep: bool):
        layers = [
            AnchoredKV(a, b, anchor.length, batch, share, keep)
            if kind == "kv"
            else AnchoredLinear(a, b, batch, share, keep)
            for kind, a, b in anchor.layers
        ]
        super().__init__(layers=layers)
        self.anchor_length = anchor.length

    def row_state(self, b: int, length: int) -> NodeState:
        return NodeState([layer.row(b) for layer in self.layers], length)

    def live(self):
        for layer in self.layers:
            yield from layer.live()


class StateLedger:
    """Peak live state bytes over observation points (distinct storages counted once, `kernels.live_bytes`)."""

    def __init__(self):
        self.peak = 0
        self.peak_recurrent = 0

    def observe(self, states, caches=()):
        seen: set = set()
        recurrent = live_bytes(
            (t for state in states for kind, *pair in state.layers if kind == "linear" for t in pair), seen
        )
        recurrent += live_bytes(
            (
                t
                for cache in caches
                for layer in cache.layers
                if isinstance(layer, AnchoredLinear)
                for t in layer.live()
            ),
            seen,
        )
        other = live_bytes((t for state in states for t in state.tensors()), seen)
        other += live_bytes((t for cache in caches for layer in cache.layers for t in layer.live()), seen)
        self.peak = max(self.peak, recurrent + other)
        self.peak_recurrent = max(self.peak_recurrent, recurrent)
