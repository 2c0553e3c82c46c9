"""What a model call costs and returns: the per-question counters (`Work`), the scored result (`Scored`), token
counts of a question, and the byte counters of cached states (`state_bytes` per tensor, `live_bytes` per storage)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..prompts import EncodedQuestion
from ..types import Usage


@dataclass
class Work:
    """Per-question counters, frozen into `Usage` at the end.

    `reused_tokens`: prefix tokens read from a prefix kept by an earlier call instead of computed (never
    counted in `prefix_tokens`); `Usage` has no field for it, the scorer sums it (`KeptPrefix.reused_tokens`)."""

    prefix_tokens: int = 0
    candidate_tokens: int = 0
    forward_calls: int = 0
    cache_bytes: int = 0
    image_tokens: int = 0
    reused_tokens: int = 0

    def usage(self) -> Usage:
        return Usage(self.prefix_tokens, self.candidate_tokens, self.forward_calls, self.cache_bytes, self.image_tokens)


@dataclass
class Scored:
    """Candidate log-likelihoods of one question and the work done; `peak_recurrent_bytes` is the
    largest recurrent state kept at once (FastJEV's segmented schedule on hybrid models; 0 elsewhere)."""

    logprobs: list[float]
    work: Work = field(default_factory=Work)
    peak_recurrent_bytes: int = 0
    greedy: list[bool] | None = None  # per candidate: every token is the argmax (only when asked, see `gather_sums`)

    def take_greedy(self) -> "Scored":
        """Split (sum, greedy) pairs gathered with `greedy=True` into `logprobs` and `greedy`."""
        if self.logprobs and isinstance(self.logprobs[0], tuple):
            self.greedy = [bool(flag) for _, flag in self.logprobs]
            self.logprobs = [value for value, _ in self.logprobs]
        return self


def fed_tokens(question: EncodedQuestion) -> int:
    """Continuation tokens a cached or packed schedule feeds (all but each candidate's last)."""
    return sum(len(c) - 1 for c in question.continuations)


def packed_tokens(question: EncodedQuestion) -> int:
    """Tokens a question adds to a packed call on its own: prefix + fed continuation tokens."""
    return len(question.prefix) + fed_tokens(question)


def model_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


def state_tensors(cache):
    """Every state tensor a transformers cache holds: attention keys/values, convolution and recurrent states."""
    for layer in getattr(cache, "layers", None) or []:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                yield tensor
        for name in ("conv_states", "recurrent_states"):
            for tensor in (getattr(layer, name, None) or {}).values():
                if isinstance(tensor, torch.Tensor):
                    yield tensor


def state_bytes(cache) -> int:
    """Bytes of every state tensor of a transformers cache (`Usage.cache_bytes` of `jet`'s schedules)."""
    return sum(t.numel() * t.element_size() for t in state_tensors(cache))


def live_bytes(tensors, seen: set | None = None) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one parent, e.g. broadcast rows, count once);
    storages already in `seen` are skipped, and the new ones added to it."""
    seen = set() if seen is None else seen
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total
