"""The `fastjev` scorer: JET scores (the same rule and API as `jet`) computed with T, S and P.

Importing this module does not import torch; the model loads when the scorer is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from jetgym.scorers.base import ScorerBase, check_questions, naming_question
from jetgym.scorers.decision import make_decision
from jetgym.scorers.priors import Corrections
from jetgym.scorers.prompts import EncodedQuestion
from jetgym.scorers.types import Decision, Question, validate_candidates

from .options import FastJevOptions


@dataclass(frozen=True)
class Encoded:
    """A question ready for the model: its candidate texts and their tokens."""

    question: Question
    candidates: tuple[str, ...]
    encoded: EncodedQuestion


class FastJevScorer(ScorerBase):
    """Candidate log-likelihoods through a candidate trie (T), a shared read-only context anchor (S) and
    calibrated layer skipping in candidate paths (P). T and S leave scores unchanged (within fp32
    round-off); P changes them and is measured as retention.
    """

    name = "fastjev"
    Options = FastJevOptions

    def __init__(self, model="smollm2-135m-instruct", **options):
        spec = model if isinstance(model, str) else model.spec
        self.options = FastJevOptions(model=spec, **options)
        from .pruning import decoder_layers, load_mask, require_calibration

        if self.options.pruning_k:
            require_calibration(spec, self.options.pruning_k, self.options.calibration)  # before a slow model load
        from jetgym.scorers.models import scorer_model

        self.loaded = model = scorer_model(model, self.options)
        self.corrections = Corrections(self.options)  # normalization, temperature, cached candidate priors
        self.n_layers = len(decoder_layers(model.model))
        if model.kind == "vision":
            raise ValueError(f"model {spec!r} is a vision-language model: fastjev scores text-only causal LMs")
        if self.options.schedule == "packed" and model.kind != "attention":
            raise ValueError(
                f"schedule 'packed' needs an attention-only model; {spec!r} is {model.kind}: use 'segmented' or 'auto'"
            )
        from .tree_attention import unsupported_reason

        reason = unsupported_reason(model.model.config) if model.kind == "attention" else model.kind
        if self.options.schedule == "packed" and reason:
            raise ValueError(
                f"schedule 'packed' (tree attention) cannot run {spec!r}: {reason}; use 'segmented' or 'auto'"
            )
        self.packable = reason is None  # `auto` may choose the packed plan
        self.skip = load_mask(spec, self.options.pruning_k, self.n_layers, self.options.calibration)
        from .plan import pair_cost_of

        self.pair_cost = pair_cost_of(model.model.config)
        self.last_plans: list[str] = []

    def describe(self) -> dict:
        return {
            **super().describe(),
            "components": "+".join(self.options.components),
            "skipped_layers": list(self.skip),
        }

    # ------------------------------------------------------------ encoding and planning

    def encode(self, question):
        """Token ids of a question; reads only its context, candidates, kind and images (never gold or labels)."""
        from jetgym.scorers.prompts import encode

        candidates = question.candidates or self.options.binary_texts
        validate_candidates(candidates, question.kind)
        if question.images:
            raise ValueError(f"model {self.loaded.spec!r} cannot score images: this scorer reads text only")
        return candidates, encode(
            self.loaded.tokenizer, question.context, list(candidates), self.options.template, self.loaded.window
        )

    def plan(self, encoded, skip=None) -> tuple[str, object]:
        """(plan name, trie) for one encoded question: packed / segmented / flat."""
        from .plan import choose, plan_costs
        from .trie import CandidateTrie

        skip = self.skip if skip is None else skip
        flat = CandidateTrie.build(len(encoded.prefix), encoded.continuations, share=False)
        shared = CandidateTrie.build(len(encoded.prefix), encoded.continuations) if self.options.trie else None
        schedule = self.options.schedule
        if schedule == "auto":
            costs = plan_costs(
                shared,
                flat,
                self.options.max_batch_tokens,
                self.options.call_overhead_tokens,
                self.pair_cost,
                self.packable,
                bool(skip),
            )
            name = choose(costs)
        else:
            name = schedule if shared is not None else ("packed" if schedule == "packed" else "flat")
        trie = flat if name == "flat" or shared is None else shared
        return name, trie

    # ------------------------------------------------------------ scoring

    def score_encoded(self, encoded_all, skip=None):
        """`Scored` per encoded question (logits in candidate order), under the planned schedules."""
        from .packed import score_tries_many
        from .segmented import score_segmented

        skip = self.skip if skip is None else tuple(skip)
        model = self.loaded.model
        plans = [self.plan(e, skip) for e in encoded_all]
        self.last_plans = [name for name, _ in plans]
        results = [None] * len(encoded_all)
        packed = [i for i, (name, _) in enumerate(plans) if name == "packed"]
        if packed:
            items = [(encoded_all[i].prefix, plans[i][1]) for i in packed]
            scored_all = score_tries_many(
                model, items, self.options.max_batch_tokens, skip, self.options.min_shared_prefix
            )
            for i, scored in zip(packed, scored_all):
                results[i] = scored
        for i, (name, trie) in enumerate(plans):
            if name != "packed":
                results[i] = score_segmented(
                    model, encoded_all[i].prefix, trie, self.options.max_batch_tokens, skip, share=self.options.share
                )
        return results

    def prepare(self, questions: Sequence[Question]) -> list[Encoded]:
        """Validate and tokenize (no model call)."""
        prepared = []
        questions = check_questions(questions, "prepare")
        for index, question in enumerate(questions):
            with naming_question(index, question, len(questions)):
                candidates, encoded = self.encode(question)
            prepared.append(Encoded(question, tuple(candidates), encoded))
        return prepared

    def score(self, prepared: Sequence[Encoded]) -> list[Decision]:
        """Decisions in the same order; packed questions share forward calls."""
        extra = self.corrections.prior_questions(self.loaded, [p.candidates for p in prepared])
        scored = self.score_encoded([p.encoded for p in prepared] + extra)  # candidate priors run with the questions
        del self.last_plans[len(prepared) :]
        self.corrections.take(scored[len(prepared) :])
        return [
            make_decision(
                p.question,
                p.candidates,
                result.logprobs,
                result.work.usage(),
                **self.corrections.arguments(p.candidates, [len(c) for c in p.encoded.continuations]),
            )
            for p, result in zip(prepared, scored)
        ]
