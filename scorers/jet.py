"""The `jet` scorer: JET candidate scoring with prefix reuse and packed/batched continuations."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

from .decision import make_decision
from .placement import Placement
from .prompts import TEMPLATES, Template
from .registry import register_scorer
from .types import DEFAULT_BINARY_TEXTS, Decision, Question, validate_candidates

Schedule = Literal["auto", "independent", "batched", "packed", "sequential"]
SCHEDULES = ("auto", "independent", "batched", "packed", "sequential")


@dataclass(frozen=True)
class JetOptions:
    """Options of the `jet` scorer, validated before any model is loaded.

    schedule: `independent` (one full forward per candidate, the reference), `batched` (prefix cache,
        padded continuation batches), `packed` (prefix and continuations in one masked call; several
        questions share a call in `decide_many`), `sequential` (prefix state once, then one candidate at a
        time after restoring the unchanged prefix state: one stored and one working state; any model
        kind, the one for hybrid recurrent + attention models), or `auto`: `packed` for attention-only
        models (see docs/benchmarks.md), `sequential` for hybrid models, `independent` for others.
        `batched` and `packed` need an attention-only model.
    max_batch_tokens: the most tokens one continuation call takes; larger sets run in groups.
    """

    model: str = "smollm2-135m-instruct"
    placement: Placement = field(default_factory=Placement)
    schedule: Schedule = "auto"
    template: Template = "chat"
    max_batch_tokens: int = 1024
    binary_texts: tuple[str, str] = DEFAULT_BINARY_TEXTS

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; known: {', '.join(SCHEDULES)}")
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; known: {', '.join(TEMPLATES)}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {self.max_batch_tokens}")
        object.__setattr__(self, "binary_texts", tuple(self.binary_texts))
        validate_candidates(self.binary_texts, "binary")


@register_scorer("jet")
class JetScorer:
    """Scores every candidate text by its teacher-forced log-likelihood and normalizes over the set.

    `model` is a spec (embedded name, local folder, hub id) or an already loaded `LoadedModel`.
    """

    def __init__(self, model="smollm2-135m-instruct", *, placement=None, schedule: Schedule = "auto",
                 template: Template = "chat", max_batch_tokens: int = 1024,
                 binary_texts: Sequence[str] = DEFAULT_BINARY_TEXTS):
        spec = model if isinstance(model, str) else model.spec
        self.options = JetOptions(spec, Placement.of(placement), schedule, template, max_batch_tokens, tuple(binary_texts))
        if isinstance(model, str):
            from .models import load_model

            model = load_model(model, self.options.placement)
        self.loaded = model

    def describe(self) -> dict:
        """The options as a JSON-able dict (for summaries)."""
        return {"scorer": "jet", **asdict(self.options), "schedule_used": self.schedule}

    @property
    def schedule(self) -> str:
        if self.options.schedule != "auto":
            return self.options.schedule
        return {"attention": "packed", "hybrid": "sequential"}.get(self.loaded.kind, "independent")

    def decide(self, question: Question) -> Decision:
        return self.decide_many([question])[0]

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]:
        """Decisions in the same order; with the packed schedule questions share forward calls."""
        from . import execution
        from .prompts import encode

        schedule = self.schedule
        if schedule in ("batched", "packed") and self.loaded.kind != "attention":
            raise ValueError(
                f"schedule {schedule!r} needs an attention-only model; {self.loaded.spec!r} is {self.loaded.kind}: "
                f"use schedule='sequential' or 'independent'"
            )
        prepared = []
        for question in questions:
            candidates = question.candidates or self.options.binary_texts
            validate_candidates(candidates, question.kind)
            if question.images:
                raise ValueError(f"model {self.loaded.spec!r} cannot score images: this scorer reads text only")
            unique = list(dict.fromkeys(candidates))  # identical texts are scored once, so they score identically
            encoded = encode(self.loaded.tokenizer, question.context, unique, self.options.template, self.loaded.window)
            prepared.append((question, candidates, unique, encoded))
        encoded_all = [p[3] for p in prepared]
        model = self.loaded.model
        if schedule == "packed":
            scored = execution.score_packed_many(model, encoded_all, self.options.max_batch_tokens)
        elif schedule == "sequential":
            from .sequential import score_sequential

            scored = [score_sequential(model, e) for e in encoded_all]
        elif schedule == "batched":
            scored = [execution.score_batched(model, e, self.options.max_batch_tokens) for e in encoded_all]
        else:
            scored = [execution.score_independent(model, e) for e in encoded_all]
        decisions = []
        for (question, candidates, unique, _), result in zip(prepared, scored):
            by_text = dict(zip(unique, result.logprobs))
            logprobs = [by_text[text] for text in candidates]
            decisions.append(make_decision(question, candidates, logprobs, result.work.usage()))
        return decisions
