"""Candidate log-likelihoods with gradients: the scoring rule of `jet`, differentiable, for training.

`candidate_logprobs(model, questions, schedule)` returns, per encoded question, the tensor of its candidates'
summed log p(c|x) (teacher forcing, full-vocabulary log-softmax, exactly the rule of `execution.py`) and,
on request, the hidden state of the context's last token (the input of a value head). Autograd runs
through the model; nothing here touches the inference paths.

- `packed`: the packed rows of `execution.score_packed_many` (`execution.row_call`): each row holds one
  question's prefix once with every candidate chain under it, or several neighbouring questions sharing a
  common prefix of at least `min_shared` tokens (the fixed task text of a minibatch runs once). Rows of
  similar length share one forward call of at most `max_batch_tokens` tokens. The decoder runs once per
  call, and the output head only at the positions that predict a candidate token (and the value positions),
  so neither a full-vocabulary logits tensor nor per-candidate copies of the prompt exist.
- `independent`: one full prompt + candidate sequence per candidate (the reference, and the way
  per-candidate trainers such as TWOSOME or GLAM compute it), right-padded into batches of at most
  `max_batch_tokens` tokens; padding after a sequence changes none of its outputs.
- `sequential` (hybrid recurrent models, which cannot take a tree mask): one full sequence per candidate,
  unpadded. Under gradients the prefix state is not shared across candidates.

`FrozenTrunk` (packed only): when the embeddings and the decoder layers below `depth` are frozen (a LoRA on the
last layers), what enters layer `depth` depends on the question alone, so it is kept per question and later
calls run only the layers from `depth` on. Each question then takes a row of its own (no prefix shared across
questions: the trunk runs once per question, not once per call).
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from .attention import grouped_rows
from .kernels.accounting import fed_tokens, model_device
from .kernels.packing import row_batches, shared_rows
from .kernels.tree import row_layout
from .prompts import EncodedQuestion

GradSchedule = Literal["packed", "independent", "sequential"]
GRAD_SCHEDULES = ("packed", "independent", "sequential")


@dataclass
class CandidateScores:
    """One question's candidate log-likelihoods (n,) and the context's last hidden state (d,) or None."""

    logprobs: torch.Tensor
    hidden: torch.Tensor | None = None


class FrozenTrunk:
    """The hidden states entering decoder layer `depth`, kept per question (least recently used dropped past
    `max_bytes`); valid only while the embeddings and the layers below `depth` stay frozen."""

    # decoders whose forward feeds `inputs_embeds` unchanged into their first layer (checked against the full pass)
    MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

    def __init__(self, depth: int, max_bytes: int = 1 << 30):
        self.depth, self.max_bytes, self.bytes = depth, max_bytes, 0
        self.kept: OrderedDict[tuple, torch.Tensor] = OrderedDict()

    @classmethod
    def fits(cls, model) -> bool:
        return model.config.model_type in cls.MODEL_TYPES

    def states(self, decoder, questions: list[EncodedQuestion], layout, mask, positions) -> torch.Tensor:
        """The left-padded inputs of layer `depth` for the rows of `layout` (one question per row); rows not
        kept yet run through the layers below `depth` first. Padding stays zero: a pad sees only itself."""
        autocast = torch.is_autocast_enabled(positions.device.type)
        keys = [(q.prefix, q.continuations, autocast) for q in questions]
        rows = {b: self.kept[key] for b, key in enumerate(keys) if key in self.kept}
        for b in rows:
            self.kept.move_to_end(keys[b])
        if len(rows) < len(keys):
            with torch.no_grad(), _layers(decoder, slice(0, self.depth), norm=False):
                below = decoder(
                    input_ids=layout.ids.to(positions.device),
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=False,
                ).last_hidden_state
            for b, key in enumerate(keys):
                if b not in rows:
                    rows[b] = below[b, layout.pads[b] :].clone()
                    self._keep(key, rows[b])
        out = rows[0].new_zeros(len(keys), layout.ids.shape[1], rows[0].shape[-1])
        for b, row in rows.items():
            out[b, layout.pads[b] :] = row
        return out

    def _keep(self, key: tuple, row: torch.Tensor) -> None:
        if key in self.kept:  # the same question twice in one call
            return
        self.kept[key] = row
        self.bytes += row.numel() * row.element_size()
        while self.bytes > self.max_bytes and len(self.kept) > 1:
            _, dropped = self.kept.popitem(last=False)
            self.bytes -= dropped.numel() * dropped.element_size()


@contextmanager
def _layers(decoder, part: slice, norm: bool = True):
    """The decoder with only its layers `part` (and without its final norm unless `norm`)."""
    layers, final = decoder.layers, decoder.norm
    decoder.layers = torch.nn.ModuleList(list(layers)[part])
    if not norm:
        decoder.norm = torch.nn.Identity()
    try:
        yield
    finally:
        decoder.layers, decoder.norm = layers, final


def candidate_logprobs(
    model,
    questions: Sequence[EncodedQuestion],
    schedule: GradSchedule = "packed",
    max_batch_tokens: int = 4096,
    min_shared: int = 0,
    hidden: bool = False,
    trunk: FrozenTrunk | None = None,
) -> list[CandidateScores]:
    """Differentiable candidate log-likelihoods of text questions (see the module notes)."""
    if schedule not in GRAD_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} for gradients; known: {', '.join(GRAD_SCHEDULES)}")
    if any(q.prefix_inputs for q in questions):
        raise ValueError("gradients are computed for text questions only; these questions carry image inputs")
    if trunk is not None and schedule != "packed":
        raise ValueError(f"a frozen trunk is kept for the packed schedule only, not {schedule!r}")
    if schedule == "packed":
        return _packed(model, list(questions), max_batch_tokens, 0 if trunk else min_shared, hidden, trunk)
    return _sequences(model, list(questions), max_batch_tokens if schedule == "independent" else 0, hidden)


def _decoder_and_head(model):
    return model.get_decoder(), model.get_output_embeddings()


def _sums(head, states: torch.Tensor, rows: list[int], targets: list[int], owners: list[int], n: int) -> torch.Tensor:
    """Summed log_softmax(head(states[row]))[target] per owner; the head runs once per distinct row."""
    device = states.device
    distinct = sorted(set(rows))
    index = {row: k for k, row in enumerate(distinct)}
    logits = head(states[torch.tensor(distinct, device=device)]).float()
    logprobs = torch.log_softmax(logits, dim=-1)
    picked = logprobs[torch.tensor([index[r] for r in rows], device=device), torch.tensor(targets, device=device)]
    return torch.zeros(n, dtype=picked.dtype, device=device).index_add(0, torch.tensor(owners, device=device), picked)


def _packed(
    model, questions: list[EncodedQuestion], capacity: int, min_shared: int, hidden: bool, trunk: FrozenTrunk | None
) -> list[CandidateScores]:
    from .execution import row_call

    device = model_device(model)
    decoder, head = _decoder_and_head(model)
    found, alone = shared_rows([q.prefix for q in questions], [fed_tokens(q) for q in questions], capacity, min_shared)
    if alone:
        worst = max(len(questions[i].prefix) + fed_tokens(questions[i]) for i in alone)
        raise ValueError(
            f"a question of {worst} tokens does not fit one packed call of max_batch_tokens="
            f"{capacity}: raise max_batch_tokens (or use schedule='independent')"
        )
    results: list[CandidateScores | None] = [None] * len(questions)
    for batch in row_batches([(r, row[2]) for r, row in enumerate(found)], capacity):
        built = [row_call(questions, found[r][0], found[r][1]) for r in batch]
        calls = [call for call, _ in built]
        last_keys = [[keys[-1] for keys in member_keys] for _, member_keys in built]
        layout = row_layout(calls, 0, last_keys if hidden else ())
        mask, positions = layout.mask(model.dtype).to(device), layout.positions.to(device)
        with grouped_rows(model):
            if trunk is None:
                states = decoder(
                    input_ids=layout.ids.to(device), attention_mask=mask, position_ids=positions, use_cache=False
                ).last_hidden_state
            else:
                below = trunk.states(decoder, [questions[found[r][0][0]] for r in batch], layout, mask, positions)
                with _layers(decoder, slice(trunk.depth, None)):
                    states = decoder(
                        inputs_embeds=below, attention_mask=mask, position_ids=positions, use_cache=False
                    ).last_hidden_state
        kept = states[:, torch.tensor(layout.keep, device=device)].reshape(-1, states.shape[-1])
        slots = {owner: k for k, owner in enumerate(dict.fromkeys(layout.owners))}
        sums = _sums(head, kept, layout.rows, layout.targets, [slots[o] for o in layout.owners], len(slots))
        column = {c: k for k, c in enumerate(layout.keep)}
        for b, r in enumerate(batch):
            for m, i in enumerate(found[r][0]):
                n = len(questions[i].continuations)
                logprobs = torch.stack([sums[slots[(b, (i, c))]] for c in range(n)])
                value_state = None
                if hidden:
                    value_state = kept[b * len(layout.keep) + column[layout.pads[b] + last_keys[b][m]]]
                results[i] = CandidateScores(logprobs, value_state)
    return results


def _sequences(model, questions: list[EncodedQuestion], capacity: int, hidden: bool) -> list[CandidateScores]:
    """One full sequence per candidate; `capacity` > 0 right-pads them into batches, 0 runs one at a time."""
    device = model_device(model)
    decoder, head = _decoder_and_head(model)
    items = [(i, c) for i, q in enumerate(questions) for c in range(len(q.continuations))]
    length = {(i, c): len(questions[i].prefix) + len(questions[i].continuations[c]) for i, c in items}
    batches = (
        row_batches([(k, length[item]) for k, item in enumerate(items)], capacity)
        if capacity
        else [[k] for k in range(len(items))]
    )
    values: dict[tuple[int, int], torch.Tensor] = {}
    states_at: dict[int, torch.Tensor] = {}
    for batch in batches:
        width = max(length[items[k]] for k in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        rows, targets, owners = [], [], []
        for b, k in enumerate(batch):
            i, c = items[k]
            prefix, tokens = questions[i].prefix, questions[i].continuations[c]
            ids[b, : length[items[k]]] = torch.tensor(prefix + tokens)
            mask[b, : length[items[k]]] = 1
            p = len(prefix)
            rows += [b * width + p - 1 + t for t in range(len(tokens))]
            targets += list(tokens)
            owners += [b] * len(tokens)
        states = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
        flat = states.reshape(-1, states.shape[-1])
        sums = _sums(head, flat, rows, targets, owners, len(batch))
        for b, k in enumerate(batch):
            i, c = items[k]
            values[(i, c)] = sums[b]
            if hidden and i not in states_at:
                states_at[i] = flat[b * width + len(questions[i].prefix) - 1]
    return [
        CandidateScores(torch.stack([values[(i, c)] for c in range(len(q.continuations))]), states_at.get(i))
        for i, q in enumerate(questions)
    ]
