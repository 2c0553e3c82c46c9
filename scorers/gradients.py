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
"""

from __future__ import annotations

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


def candidate_logprobs(model, questions: Sequence[EncodedQuestion], schedule: GradSchedule = "packed",
                       max_batch_tokens: int = 4096, min_shared: int = 0, hidden: bool = False) -> list[CandidateScores]:
    """Differentiable candidate log-likelihoods of text questions (see the module notes)."""
    if schedule not in GRAD_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} for gradients; known: {', '.join(GRAD_SCHEDULES)}")
    if any(q.prefix_inputs for q in questions):
        raise ValueError("gradients are computed for text questions only; these questions carry image inputs")
    if schedule == "packed":
        return _packed(model, list(questions), max_batch_tokens, min_shared, hidden)
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


def _packed(model, questions: list[EncodedQuestion], capacity: int, min_shared: int, hidden: bool) -> list[CandidateScores]:
    from .execution import row_call

    device = model_device(model)
    decoder, head = _decoder_and_head(model)
    found, alone = shared_rows([q.prefix for q in questions], [fed_tokens(q) for q in questions], capacity,
                               min_shared)
    if alone:
        worst = max(len(questions[i].prefix) + fed_tokens(questions[i]) for i in alone)
        raise ValueError(f"a question of {worst} tokens does not fit one packed call of max_batch_tokens="
                         f"{capacity}: raise max_batch_tokens (or use schedule='independent')")
    results: list[CandidateScores | None] = [None] * len(questions)
    for batch in row_batches([(r, row[2]) for r, row in enumerate(found)], capacity):
        built = [row_call(questions, found[r][0], found[r][1]) for r in batch]
        calls = [call for call, _ in built]
        last_keys = [[keys[-1] for keys in member_keys] for _, member_keys in built]
        layout = row_layout(calls, 0, last_keys if hidden else ())
        with grouped_rows(model):
            states = decoder(input_ids=layout.ids.to(device), attention_mask=layout.mask(model.dtype).to(device),
                             position_ids=layout.positions.to(device), use_cache=False).last_hidden_state
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
    batches = row_batches([(k, length[item]) for k, item in enumerate(items)], capacity) if capacity \
        else [[k] for k in range(len(items))]
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
    return [CandidateScores(torch.stack([values[(i, c)] for c in range(len(q.continuations))]), states_at.get(i))
            for i, q in enumerate(questions)]
