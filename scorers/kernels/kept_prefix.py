"""One text prefix's attention keys/values kept between calls of a scorer (`jet`'s `reuse_prefix`)."""

from __future__ import annotations

import weakref
from typing import Sequence

import torch

from .accounting import model_device
from .packing import common_length


def keeps_prefixes(model) -> bool:
    """Whether a kept prefix can serve `model`: every cache layer is a plain full-attention `DynamicLayer` (no
    sliding window, no recurrent or convolution state, no layers sharing keys)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class KeptPrefix:
    """The attention keys/values of ONE text prefix, kept between calls of a scorer (`jet`'s `reuse_prefix`).

    Bounded memory: at most one prefix is held (layers x 2 x key heads x tokens x head size); `keep` replaces
    it, `clear` drops it. It is never handed to a model: `cache(length, rows)` builds a fresh cache holding a
    copy of its first `length` keys for `rows` batch rows, so a call that appends to that cache leaves the
    kept tensors as they were. `usable(model)` drops it when the model object, its dtype or its device is not
    the one it was computed with, and refuses models whose cache is not plain attention (`keeps_prefixes`).
    Tokens are matched exactly (`reusable`), so a changed prefix never meets stale keys.
    `reused_tokens` / `reusing_calls` count what reuse saved over the scorer's life."""

    def __init__(self):
        self.tokens: tuple[int, ...] = ()
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._model = None
        self._supported: tuple | None = None  # (model ref, answer of keeps_prefixes)
        self.reused_tokens = 0
        self.reusing_calls = 0

    def __len__(self):
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer)

    def clear(self) -> None:
        self.tokens, self.layers, self._model = (), [], None

    def keep(self, model, tokens: Sequence[int], layers: list[tuple]) -> None:
        """Hold `layers` ((keys, values) per layer, batch 1, one key per token) as the states of `tokens`."""
        if any(k.shape[0] != 1 or k.shape[2] != len(tokens) or v.shape[:3] != k.shape[:3] for k, v in layers):
            raise ValueError(f"kept states must be batch 1 with {len(tokens)} keys per layer")
        self.tokens, self.layers, self._model = tuple(tokens), list(layers), weakref.ref(model)

    def usable(self, model) -> bool:
        """Whether prefixes can be kept for `model`; a prefix kept for another model, dtype or device is dropped."""
        if self._supported is None or self._supported[0]() is not model:
            self._supported = (weakref.ref(model), keeps_prefixes(model))
        if not self._supported[1]:
            self.clear()
            return False
        if self.layers:
            keys = self.layers[0][0]
            if self._model() is not model or keys.dtype != model.dtype or keys.device != model_device(model):
                self.clear()
        return True

    def reusable(self, prefixes: Sequence[Sequence[int] | None], min_shared: int) -> tuple[int, list[int]]:
        """(length, indices): how many leading kept tokens the call reads, and the prefixes that read them.

        A prefix (None: not a text prefix) can read r = min(common length with the kept tokens, its length - 1)
        tokens: its last token always runs, its logits give the first candidate tokens. Only r >= `min_shared`
        (> 0) counts. One length serves the call: the one that saves the most tokens (length x readers; the
        longer on a tie); every prefix with r at least that long reads it."""
        if not self.tokens or min_shared < 1:
            return 0, []
        reach = [None if p is None else min(common_length(self.tokens, p), len(p) - 1) for p in prefixes]
        lengths = {r for r in reach if r is not None and r >= min_shared}
        if not lengths:
            return 0, []
        best = max(lengths, key=lambda n: (n * sum(r is not None and r >= n for r in reach), n))
        return best, [i for i, r in enumerate(reach) if r is not None and r >= best]

    def cache(self, length: int, rows: int = 1):
        """A fresh transformers cache holding a copy of the first `length` kept keys, repeated over `rows`."""
        from transformers.cache_utils import DynamicCache

        if not 0 < length <= len(self.tokens):
            raise ValueError(f"cannot read {length} keys of a kept prefix of {len(self.tokens)} tokens")
        return DynamicCache(
            ddp_cache_data=[  # the cache copies the expanded views into tensors of its own
                (k[:, :, :length].expand(rows, -1, -1, -1), v[:, :, :length].expand(rows, -1, -1, -1))
                for k, v in self.layers
            ]
        )
