"""The trainable policy: a loaded model (with a LoRA adapter, or all weights trainable), a value head, and
the `jet` scorer that acts with the same weights.

`Policy.evaluate(questions)` gives, with gradients, each question's log q(c|x) over its candidates (the
scorer's decision rule: the same `normalization` and `temperature`, softmax over the candidates) and the
value of its context (a linear head on the context's last hidden state). The scorer (`Policy.scorer`)
runs the same weights without gradients for rollouts and evaluation; after each optimizer step
`Policy.weights_changed()` drops the prefix it keeps between calls, so it never reads stale keys, and the
decisions it keeps (`memoize`: `jetgym.scorers.memo.MemoizedScorer`, so a rollout that revisits a question
within one weight version scores it once).
Identical questions of one `evaluate` call share one forward and backward pass (aggregation): each is
evaluated once and its result stands for every copy, so a loss summed over the copies has the same value and
gradient as one evaluating every copy.
A LoRA on the last `lora_layers` layers leaves the layers below frozen, so what enters the first trained
layer is kept per question (`gradients.FrozenTrunk`) and later epochs run only the trained layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from jetgym.scorers import Question
from jetgym.scorers.adapters import FULL_WEIGHTS, base_fingerprint, quiet_peft, write_metadata
from jetgym.scorers.gradients import FrozenTrunk, candidate_logprobs
from jetgym.scorers.memo import MemoizedScorer, distinct

from .options import LoraOptions

TRAINABLE_NORMALIZATIONS = ("none", "token", "byte")
VALUE_HEAD = "value_head.safetensors"


@dataclass
class Evaluated:
    """log q over each question's candidates (list of (n_i,) tensors) and the values (questions,)."""

    log_q: list[torch.Tensor]
    values: torch.Tensor
    raw: list[torch.Tensor] = field(default_factory=list)


class Policy:
    """Scorer + trainable weights + value head over one loaded model (see the module notes)."""

    def __init__(
        self,
        scorer,
        lora: LoraOptions = LoraOptions(),
        seed: int = 0,
        grad_schedule: str = "packed",
        memoize: bool = True,
        aggregate: bool = True,
    ):
        options = scorer.options
        if options.normalization not in TRAINABLE_NORMALIZATIONS:
            raise ValueError(
                f"scorer.normalization={options.normalization!r} cannot be trained (its prior runs "
                f"outside the gradient): use one of {', '.join(TRAINABLE_NORMALIZATIONS)}"
            )
        self.scorer = MemoizedScorer(scorer) if memoize else scorer
        self.lora, self.grad_schedule, self.aggregate = lora, grad_schedule, aggregate
        self.trunk: FrozenTrunk | None = None
        loaded = scorer.loaded
        if loaded.kind != "attention" and grad_schedule == "packed":
            self.grad_schedule = "sequential"
        torch.manual_seed(seed)
        model = loaded.model
        self.fingerprint = base_fingerprint(model)
        if lora.finetune == "lora":
            from peft import LoraConfig, get_peft_model

            n_layers = model.config.num_hidden_layers
            trained = lora.layers_of(n_layers)
            layers = list(range(n_layers - trained, n_layers)) if trained < n_layers else None
            config = LoraConfig(
                r=lora.lora_rank,
                lora_alpha=lora.lora_alpha,
                lora_dropout=0.0,
                target_modules=list(lora.lora_targets),
                layers_to_transform=layers,
                bias="none",
            )
            with quiet_peft():
                self.peft = get_peft_model(model, config)  # injects the adapter into `model` in place
            frozen = n_layers - trained
            if frozen and self.grad_schedule == "packed" and FrozenTrunk.fits(model):
                self.trunk = FrozenTrunk(frozen)
        else:
            self.peft = None
            for parameter in model.parameters():
                parameter.requires_grad_(True)
        self.model = model
        hidden = model.get_input_embeddings().weight.shape[1]
        self.value_head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)
        self.model.eval()  # no dropout: rollouts and updates see the same function
        self._initial = self.state() if self.peft is not None else None  # what `reset` restores

    def reset(self) -> None:
        """The adapter and value head as they were made (the base model's behaviour again): a fresh start for
        a fit. A policy training every weight has no copy of them kept, so it is refused."""
        if self._initial is None:
            raise ValueError("resetting the policy needs a LoRA adapter (train.finetune=lora)")
        self.load_state(self._initial)

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trained parameters: the adapter (or every weight) and the value head."""
        return [p for p in self.model.parameters() if p.requires_grad] + list(self.value_head.parameters())

    def state(self) -> dict[str, torch.Tensor]:
        """Every trained tensor by name (checkpoints)."""
        named = {f"model.{n}": p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        named.update({f"value_head.{n}": p.detach().clone() for n, p in self.value_head.named_parameters()})
        return named

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in state.items():
                kind, _, rest = name.partition(".")
                target = params[rest] if kind == "model" else dict(self.value_head.named_parameters())[rest]
                target.copy_(tensor)
        self.weights_changed()

    def weights_changed(self) -> None:
        kept = getattr(self.scorer, "kept_prefix", None)
        if kept is not None:
            kept.clear()
        if isinstance(self.scorer, MemoizedScorer):
            self.scorer.clear()

    def evaluate(self, questions: Sequence[Question], reference: bool = False) -> Evaluated:
        """log q(c|x) per question and the context values, with gradients (`reference`: the base model,
        adapter off, no gradient: the frozen policy of the KL term). Identical questions are evaluated once
        (`aggregate`) and their results shared."""
        if not self.aggregate:
            return self._evaluate(questions, reference)
        unique, where = distinct(questions)
        if len(unique) == len(questions):
            return self._evaluate(questions, reference)
        once = self._evaluate(unique, reference)
        return Evaluated([once.log_q[i] for i in where], once.values[torch.tensor(where)], [once.raw[i] for i in where])

    def _evaluate(self, questions: Sequence[Question], reference: bool) -> Evaluated:
        prepared = self.scorer.prepare(questions)
        encoded = [p.encoded for p in prepared]
        options = self.scorer.options
        if reference:
            if self.peft is None:
                raise ValueError("train.kl_coef needs finetune=lora (the frozen model is the adapter switched off)")
            with torch.no_grad(), self.peft.disable_adapter():  # the trunk has no adapter: the same states
                scored = candidate_logprobs(
                    self.model,
                    encoded,
                    self.grad_schedule,
                    options.max_batch_tokens,
                    options.min_shared_prefix,
                    trunk=self.trunk,
                )
        else:
            scored = candidate_logprobs(
                self.model,
                encoded,
                self.grad_schedule,
                options.max_batch_tokens,
                options.min_shared_prefix,
                hidden=True,
                trunk=self.trunk,
            )
        log_q, raw = [], []
        for item, result in zip(prepared, scored):
            order = [item.unique.index(text) for text in item.candidates]
            logprobs = result.logprobs[torch.tensor(order)]
            raw.append(logprobs)
            log_q.append(torch.log_softmax(self._corrected(logprobs, item) / options.temperature, dim=0))
        if reference:
            return Evaluated(log_q, torch.zeros(len(questions)), raw)
        states = torch.stack([result.hidden for result in scored]).float()
        return Evaluated(log_q, self.value_head(states).squeeze(-1), raw)

    def _corrected(self, logprobs: torch.Tensor, item) -> torch.Tensor:
        normalization = self.scorer.options.normalization
        if normalization == "token":
            lengths = dict(zip(item.unique, map(len, item.encoded.continuations)))
            return logprobs / torch.tensor([lengths[t] for t in item.candidates], dtype=logprobs.dtype)
        if normalization == "byte":
            return logprobs / torch.tensor([len(t.encode("utf-8")) for t in item.candidates], dtype=logprobs.dtype)
        return logprobs

    def save(self, folder: Path) -> None:
        """Write the adapter (peft format, or full weights) with its metadata and the value head."""
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        loaded = self.scorer.loaded
        if self.peft is not None:
            self.peft.save_pretrained(str(folder))
        else:
            from safetensors.torch import save_model

            save_model(self.model, str(folder / FULL_WEIGHTS))  # tied weights stored once
        save_file(
            {n: p.detach().contiguous() for n, p in self.value_head.state_dict().items()}, str(folder / VALUE_HEAD)
        )
        write_metadata(folder, loaded.spec, loaded.model, self.fingerprint, self.lora.finetune)
