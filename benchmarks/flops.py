"""How far a benchmark is from the hardware limit: model FLOPs of the tokens a method ran, and the peak of a
large matmul in the same dtype, measured in the same process (shared by the benchmark jobs).

Model FLOPs count 2 per matrix weight a token multiplies (`ModelFlops`): every decoder layer it passes through
(layers skipped by pruning are not), and the output head for candidate tokens only (a scorer needs one logits
row per candidate token; prefix tokens need none). The input embedding is a lookup (0 FLOPs); norms, biases,
activations and the attention scores (query x key products) are left out, so the figure slightly understates
the work of long contexts. Achieved model FLOP/s = model FLOPs of the tokens a method fed / its seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ModelFlops:
    """FLOPs of one token's forward: `per_layer` (2 x each decoder layer's matrix weights), `rest` (2 x the
    matrix weights outside the layers, the input embedding and the output head), `head` (2 x the output head's
    weights: one logits row)."""

    per_layer: tuple[float, ...]
    rest: float
    head: float

    @classmethod
    def of(cls, model) -> "ModelFlops":
        from jetgym.scorers.fastjev.pruning import decoder_layers

        layers = decoder_layers(model)
        embedding = model.get_input_embeddings().weight
        output = model.get_output_embeddings()
        head = output.weight if output is not None else embedding  # tied or absent head: the embedding matrix
        in_layers = {id(p) for layer in layers for p in layer.parameters()}
        skip = in_layers | {id(embedding), id(head)}
        rest = sum(p.numel() for p in model.parameters() if p.dim() >= 2 and id(p) not in skip)
        per_layer = tuple(2.0 * sum(p.numel() for p in layer.parameters() if p.dim() >= 2) for layer in layers)
        return cls(per_layer, 2.0 * rest, 2.0 * head.numel())

    def per_token(self) -> float:
        """A token through every layer, with its logits row."""
        return sum(self.per_layer) + self.rest + self.head

    def __call__(self, prefix_tokens: int, candidate_tokens: int, skipped: Iterable[int] = ()) -> float:
        """Model FLOPs of a scoring run: prefix tokens through every layer (no logits), candidate tokens through
        every layer but `skipped` (0-based), each with one logits row."""
        body = sum(self.per_layer) + self.rest
        skipped_flops = sum(self.per_layer[i] for i in set(skipped))
        return prefix_tokens * body + candidate_tokens * (body - skipped_flops + self.head)


def matmul_peak(dtype, size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of the best of `repeats` size x size matmuls in `dtype` (this process, these threads)."""
    import torch

    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def model_dtype(model):
    """The dtype of the model's first floating-point parameter (float32 when it has none)."""
    import torch

    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")
