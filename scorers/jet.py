"""The `jet` scorer: JET candidate scoring with prefix reuse and packed/batched continuations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import ScorerBase, check_questions, naming_question
from .decision import make_decision
from .options import ScorerOptions
from .priors import Corrections
from .prompts import EncodedQuestion
from .types import Decision, Question, validate_candidates

SCHEDULES = ("auto", "independent", "batched", "packed", "sequential")


@dataclass(frozen=True)
class JetOptions(ScorerOptions):
    """Options of the `jet` scorer (the shared ones are documented on `ScorerOptions`).

    schedule: `independent` (one full forward per candidate, the reference), `batched` (prefix cache,
        padded continuation batches), `packed` (prefix and continuations in one masked call; several
        questions share a call in `decide_many`, and a common prefix of neighbours runs once, see
        `min_shared_prefix`), `sequential` (prefix state once, then one candidate at a
        time after restoring the unchanged prefix state: one stored and one working state; any model
        kind, the one for hybrid recurrent + attention models), or `auto`: `packed` for attention-only
        models (see docs/benchmarks.md), `sequential` for hybrid and vision-language models (the images
        run once, with the prefix), `independent` for others. `batched` and `packed` need an
        attention-only model.
    reuse_prefix: with the `packed` schedule, keep the attention keys/values of the last question's text
        prefix after each call, and let the next call's questions that begin with at least
        `min_shared_prefix` of its tokens read that part instead of computing it again (e.g. the system
        message and worked examples an agent sends at every step; each question's last prefix token always
        runs, its logits give the first candidate tokens). Scores are unchanged (fp32 equal to the
        `independent` path); `Usage.prefix_tokens` counts only the prefix tokens computed in the call, the
        ones read are counted by the scorer's `kept_prefix` (`reused_tokens`, `reusing_calls`). At most one
        prefix is kept (memory: one prefix's keys/values, shown as the keeping question's
        `Usage.cache_bytes`), replaced after every call; tokens are matched exactly, and it is dropped when
        the model object, its dtype or device changes, so stale keys are never read (call
        `kept_prefix.clear()` after changing the weights in place). Models with sliding-window layers keep
        nothing. Off: every call computes its prefixes.
    reasoning: generate a trace once per question (at most `reasoning_tokens`, greedy when
        `reasoning_temperature` is 0, else sampled with `reasoning_seed`), append it and
        `reasoning_suffix` to the shared context, and record it in the decision. Text only: refused for
        questions with images.
    """

    SCHEDULES: ClassVar[tuple[str, ...]] = SCHEDULES

    reuse_prefix: bool = True
    reasoning: bool = False
    reasoning_tokens: int = 128
    reasoning_temperature: float = 0.0
    reasoning_seed: int = 0
    reasoning_suffix: str = "\nAnswer:"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.reuse_prefix, bool):
            raise ValueError(f"reuse_prefix must be true or false, got {self.reuse_prefix!r}")
        if self.reasoning_tokens < 1:
            raise ValueError(f"reasoning_tokens must be at least 1, got {self.reasoning_tokens}")
        if self.reasoning_temperature < 0:
            raise ValueError(f"reasoning_temperature must be >= 0, got {self.reasoning_temperature}")


class JetScorer(ScorerBase):
    """Scores every candidate text by its teacher-forced log-likelihood and normalizes over the set.

    `model` is a spec (embedded name, local folder, hub id) or an already loaded `LoadedModel`.
    """

    name = "jet"
    Options = JetOptions
    uses = frozenset({"train", "lm-eval"})

    def __init__(self, model="smollm2-135m-instruct", **options):
        spec = model if isinstance(model, str) else model.spec
        self.options = JetOptions(model=spec, **options)
        from .models import scorer_model

        self.loaded = model = scorer_model(model, self.options)
        self.corrections = Corrections(self.options)  # normalization, temperature, cached candidate priors
        self.kept_prefix = None  # the prefix kept between `packed` calls (`reuse_prefix`), made on first use

    def describe(self) -> dict:
        return {**super().describe(), "schedule_used": self.schedule}

    @property
    def schedule(self) -> str:
        if self.options.schedule != "auto":
            return self.options.schedule
        return {"attention": "packed", "hybrid": "sequential", "vision": "sequential"}.get(
            self.loaded.kind, "independent"
        )

    def prepare(self, questions: Sequence[Question]) -> list[Prepared]:
        """Validate, render and tokenize (and generate reasoning traces): the work before scoring.

        `jetgym-qa` runs this for the next questions in a worker while the current ones are scored."""
        if self.schedule in ("batched", "packed") and self.loaded.kind != "attention":
            raise ValueError(
                f"schedule {self.schedule!r} needs an attention-only model; {self.loaded.spec!r} is {self.loaded.kind}: "
                f"use schedule='sequential' or 'independent'"
            )
        vision = self.loaded.kind == "vision"
        prepared = []
        questions = check_questions(questions, "prepare")
        for index, question in enumerate(questions):
            with naming_question(index, question, len(questions)):
                prepared.append(self._prepare_one(question, vision))
        return prepared

    def _prepare_one(self, question: Question, vision: bool) -> Prepared:
        """One question: validate, render, tokenize."""
        from .prompts import encode, render_context

        candidates = question.candidates or self.options.binary_texts
        validate_candidates(candidates, question.kind)
        if question.images and not vision:
            raise ValueError(
                f"model {self.loaded.spec!r} cannot score images: it is a text-only "
                f"({self.loaded.kind}) model; use a vision-language model"
            )
        if question.images and self.options.reasoning:
            raise ValueError("reasoning is not supported with image input: set reasoning=False")
        trace = None
        trace_ids: list[int] = []
        if self.options.reasoning:
            context_ids = render_context(self.loaded.tokenizer, question.context, self.options.template)
            trace, trace_ids = self._reasoning_trace(question, context_ids)
        unique = tuple(dict.fromkeys(candidates))  # identical texts are scored once, so they score identically
        if question.images or (vision and self.options.template == "chat" and not self.options.reasoning):
            from .vision import encode_vision  # the processor renders images (and text for vision models)

            encoded = encode_vision(
                self.loaded.processor,
                question.context,
                question.images,
                unique,
                self.options.template,
                self.loaded.window,
            )
        else:
            encoded = encode(
                self.loaded.tokenizer, question.context, unique, self.options.template, self.loaded.window, trace_ids
            )
        return Prepared(question, tuple(candidates), unique, encoded, trace)

    def score(self, prepared: Sequence[Prepared]) -> list[Decision]:
        """Run the model on prepared questions and apply the decision rule."""
        from . import execution

        extra = self.corrections.prior_questions(self.loaded, [p.unique for p in prepared])
        encoded = [p.encoded for p in prepared] + extra  # candidate priors run with the questions
        model, schedule = self.loaded.model, self.schedule
        if schedule == "packed":
            if self.options.reuse_prefix and self.kept_prefix is None:
                from .kernels.kept_prefix import KeptPrefix

                self.kept_prefix = KeptPrefix()
            scored = execution.score_packed_many(
                model,
                encoded,
                self.options.max_batch_tokens,
                self.options.min_shared_prefix,
                self.kept_prefix,
                keep=len(prepared) - 1 if prepared else None,
            )
        elif schedule == "sequential":
            from .sequential import score_sequential

            scored = [score_sequential(model, e) for e in encoded]
        elif schedule == "batched":
            scored = [execution.score_batched(model, e, self.options.max_batch_tokens) for e in encoded]
        else:
            scored = [execution.score_independent(model, e) for e in encoded]
        self.corrections.take(scored[len(prepared) :])
        decisions = []
        for item, result in zip(prepared, scored):
            by_text = dict(zip(item.unique, result.logprobs))
            logprobs = [by_text[text] for text in item.candidates]
            lengths = dict(zip(item.unique, map(len, item.encoded.continuations)))
            corrections = self.corrections.arguments(item.candidates, [lengths[text] for text in item.candidates])
            decisions.append(
                make_decision(item.question, item.candidates, logprobs, result.work.usage(), item.trace, **corrections)
            )
        return decisions

    def _reasoning_trace(self, question: Question, context_ids: list[int]) -> tuple[str, list[int]]:
        """Generate the question's trace once (seeded by the reasoning seed and the question id).

        Returns the trace text and the tokens that join the shared prefix: the generated tokens
        (without end-of-turn) followed by the tokenized `reasoning_suffix`."""
        import zlib

        import torch

        options, tokenizer = self.options, self.loaded.tokenizer
        torch.manual_seed(options.reasoning_seed + zlib.crc32((question.id or str(question.context)).encode()))
        sampling = (
            {"do_sample": True, "temperature": options.reasoning_temperature}
            if options.reasoning_temperature > 0
            else {"do_sample": False}
        )
        with torch.inference_mode():
            output = self.loaded.model.generate(
                input_ids=torch.tensor([context_ids], device=self.loaded.device),
                max_new_tokens=options.reasoning_tokens,
                pad_token_id=tokenizer.eos_token_id,
                **sampling,
            )
        special = set(tokenizer.all_special_ids)
        generated = [t for t in output[0, len(context_ids) :].tolist() if t not in special]
        suffix = tokenizer(options.reasoning_suffix, add_special_tokens=False)["input_ids"]
        return tokenizer.decode(generated), generated + suffix


@dataclass(frozen=True)
class Prepared:
    """A question ready for the model: its candidates, the unique texts scored, their tokens, the trace."""

    question: Question
    candidates: tuple[str, ...]
    unique: tuple[str, ...]
    encoded: EncodedQuestion
    trace: str | None = None
