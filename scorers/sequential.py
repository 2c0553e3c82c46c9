"""The `sequential` schedule: prefix state once, then one candidate at a time from the restored prefix state.

Hybrid models (recurrent + attention layers: Qwen3.5 / Qwen3-Next Gated DeltaNet, Mamba2, LFM2) keep a
recurrent and a convolution state that every fed token overwrites, so their continuations cannot be
packed under one attention mask. This schedule
- runs the prefix once with its cache: that cache is the ONE stored prefix state, and its last logits
  give every candidate's first-token log-prob (single-token candidates need no further call);
- copies it once into ONE working state, and feeds each multi-token candidate into the working state,
  after restoring the unchanged prefix state into it in place:
  - recurrent and convolution states (`LinearAttentionLayer`): `copy_` from the stored tensors (their
    shapes never change, transformers updates them in place), and the layer's token count where it keeps one;
  - attention keys/values (`DynamicLayer`, `DynamicSlidingWindowLayer`): cut back to the stored length
    and `copy_` the stored tensors into the cut (a sliding layer also gets its token count back);
  - hybrid layers carrying both get both.
So candidates never see each other, and two states exist whatever the candidate count.
`Work.cache_bytes` is the stored state plus the working state at its largest (after the longest candidate).
"""

from __future__ import annotations

import copy

import torch

from .execution import score_with_prefix_cache
from .kernels.accounting import Scored, model_device, state_bytes
from .kernels.logprobs import gather_sums
from .prompts import EncodedQuestion


def _layer_classes():
    from transformers import cache_utils as cu

    return cu, {
        cu.DynamicLayer,
        cu.DynamicSlidingWindowLayer,
        cu.LinearAttentionLayer,
        cu.LinearAttentionAndFullAttentionLayer,
        cu.LinearAttentionAndSlidingWindowAttentionLayer,
        cu.DummyLayer,
    }


def check_restorable(cache) -> None:
    """Raise a clear error unless every layer of `cache` is one whose prefix state we know how to restore."""
    cu, supported = _layer_classes()
    if not isinstance(cache, cu.Cache):
        raise TypeError(
            f"the sequential schedule needs a transformers Cache from the prefix call, got {type(cache).__name__}: "
            f"this model does not return a restorable cache; use schedule='independent'"
        )
    if getattr(cache, "offloading", False):
        raise TypeError("the sequential schedule cannot restore an offloaded cache; use schedule='independent'")
    names = ", ".join(sorted(c.__name__ for c in supported))
    for index, layer in enumerate(cache.layers):
        if type(layer) not in supported:
            raise TypeError(
                f"the sequential schedule cannot restore cache layer {index} of type {type(layer).__name__} "
                f"(in {type(cache).__name__}); supported: {names}. Use schedule='independent'"
            )
        if getattr(layer, "record_past", False):
            raise TypeError(f"cache layer {index} records past states; the sequential schedule needs plain layers")


def _clone_state(stored):
    """The one working state, made once per question."""
    return copy.deepcopy(stored)


def restore_prefix_state(working, stored) -> None:
    """Put the stored prefix state back into `working` in place (no new state is allocated)."""
    cu, _ = _layer_classes()
    for work, keep in zip(working.layers, stored.layers):
        if isinstance(keep, cu.LinearAttentionLayer):
            for i in range(keep.number_of_states):
                for name in ("conv_states", "recurrent_states"):
                    source = getattr(keep, name)[i]
                    if source is not None:
                        getattr(work, name)[i].copy_(source)
                work.has_previous_state[i] = keep.has_previous_state[i]
            if hasattr(keep, "cumulative_length_linear"):  # transformers >= 5.25 counts the tokens a linear layer saw
                work.cumulative_length_linear.copy_(keep.cumulative_length_linear)
        if isinstance(keep, cu.DynamicLayer) and keep.is_initialized:
            length = keep.keys.shape[-2]
            work.keys = work.keys[..., :length, :]
            work.values = work.values[..., :length, :]
            work.keys.copy_(keep.keys)
            work.values.copy_(keep.values)
            if hasattr(keep, "cumulative_length"):
                work.cumulative_length = keep.cumulative_length


@torch.inference_mode()
def score_sequential(model, question: EncodedQuestion) -> Scored:
    """Prefix once with its state; each multi-token candidate continues the restored prefix state."""
    scored = Scored([])
    stored = score_with_prefix_cache(model, question, scored)
    check_restorable(stored)
    stored_bytes = state_bytes(stored)
    scored.work.cache_bytes = stored_bytes
    longer = [i for i, c in enumerate(question.continuations) if len(c) > 1]
    if not longer:
        return scored
    device = model_device(model)
    working = _clone_state(stored)
    working_peak = state_bytes(working)
    for n, i in enumerate(longer):
        if n:
            restore_prefix_state(working, stored)
        tokens = question.continuations[i]
        out = model(input_ids=torch.tensor([tokens[:-1]], device=device), cache=working, use_cache=True)
        fed = len(tokens) - 1
        scored.logprobs[i] += gather_sums(out.logits[0], list(range(fed)), list(tokens[1:]), [0] * fed, 1)[0]
        working_peak = max(working_peak, state_bytes(working))
        scored.work.candidate_tokens += fed
        scored.work.forward_calls += 1
    scored.work.cache_bytes = stored_bytes + working_peak
    return scored
