"""A question's context run once with a cache (`prefix_call`), and the extra inputs of image prefixes."""

from __future__ import annotations

from typing import Sequence

import torch

from ..prompts import EncodedQuestion
from .accounting import Work, model_device
from .logprobs import gather_sums


def prefix_inputs(model, question: EncodedQuestion, added: int = 0) -> dict:
    """The question's extra prefix inputs (image pixels, grid, ...; none for text) on the model's device.

    Per-token inputs (shape (1, prefix length), e.g. `mm_token_type_ids`) get `added` zeros (text tokens)
    for the candidate tokens that follow the prefix in the same call."""
    if not question.prefix_inputs:
        return {}
    device, p, inputs = model_device(model), len(question.prefix), {}
    for name, value in question.prefix_inputs.items():
        if isinstance(value, torch.Tensor):
            if added and value.ndim == 2 and tuple(value.shape) == (1, p):
                value = torch.cat([value, value.new_zeros(1, added)], dim=1)
            value = value.to(device, model.dtype) if value.is_floating_point() else value.to(device)
        inputs[name] = value
    return inputs


def forget_positions(model) -> None:
    """Drop position offsets a vision-language model kept from its last prefix (Qwen-VL `rope_deltas`,
    which its cached calls add to the cache length): the next prefix call sets them afresh."""
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


@torch.inference_mode()
def prefix_call(
    model,
    prefix: Sequence[int],
    targets: Sequence[int],
    work: Work,
    inputs: dict | None = None,
    cache=None,
    greedy: bool = False,
):
    """Run `prefix` once with a cache (every layer); return (cache, log-probs of `targets` as next tokens).

    `inputs`: the prefix's extra model inputs (`prefix_inputs`), None for text. `cache`: a cache already
    holding the prefix's first keys (text only; it is extended in place and returned): only the rest runs.
    Counts the prefix tokens run and the call in `work`. `greedy`: (log-prob, is argmax) pairs."""
    if inputs is not None:
        forget_positions(model)
    done = 0 if cache is None else cache.get_seq_length()
    if not 0 <= done < len(prefix) or (done and inputs):
        raise ValueError(f"a cache of {done} keys cannot start a text prefix of {len(prefix)} tokens")
    out = model(
        input_ids=torch.tensor([list(prefix[done:])], device=model_device(model)),
        use_cache=True,
        logits_to_keep=1,
        cache=cache,
        **(inputs or {}),
    )
    sums = gather_sums(
        out.logits[0, -1:], [0] * len(targets), list(targets), list(range(len(targets))), len(targets), greedy
    )
    work.prefix_tokens += len(prefix) - done
    work.forward_calls += 1
    return out.cache, sums
