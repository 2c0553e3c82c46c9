"""The `fastjev` scorer: JET scores (the same rule and API as `jet`) computed with T, S and P.

Importing this module does not import torch; the model loads when the scorer is built.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Sequence

from scorers.decision import make_decision
from scorers.placement import Placement
from scorers.registry import register_scorer
from scorers.types import DEFAULT_BINARY_TEXTS, Decision, Question, validate_candidates

from .options import COMPONENTS, FastJevOptions


@register_scorer("fastjev")
class FastJevScorer:
    """Candidate log-likelihoods through a candidate trie (T), a shared read-only context anchor (S) and
    calibrated layer skipping in candidate paths (P). T and S leave scores unchanged (within fp32
    round-off); P changes them and is measured as retention. `readout` replaces the JET readout
    (sum of token log-probs per candidate path) for models with their own decision head.
    """

    def __init__(self, model="smollm2-135m-instruct", *, placement=None, components=COMPONENTS, schedule="auto",
                 template="chat", max_batch_tokens: int = 1024, pruning_k: int = 0, calibration: str | None = None,
                 call_overhead_tokens: float = 32.0, binary_texts: Sequence[str] = DEFAULT_BINARY_TEXTS, readout=None):
        spec = model if isinstance(model, str) else model.spec
        self.options = FastJevOptions(spec, Placement.of(placement), components, schedule, template, max_batch_tokens,
                                      pruning_k, calibration, call_overhead_tokens, tuple(binary_texts))
        from .pruning import decoder_layers, load_mask, require_calibration

        if self.options.pruning_k:
            require_calibration(spec, self.options.pruning_k, self.options.calibration)  # before a slow model load
        if isinstance(model, str):
            from scorers.models import load_model

            model = load_model(model, self.options.placement)
        self.loaded = model
        self.n_layers = len(decoder_layers(model.model))
        if model.kind == "vision":
            raise ValueError(f"model {spec!r} is a vision-language model: fastjev scores text-only causal LMs")
        if self.options.schedule == "packed" and model.kind != "attention":
            raise ValueError(f"schedule 'packed' needs an attention-only model; {spec!r} is {model.kind}: use 'segmented' or 'auto'")
        from .tree_attention import unsupported_reason

        reason = unsupported_reason(model.model.config) if model.kind == "attention" else model.kind
        if self.options.schedule == "packed" and reason:
            raise ValueError(f"schedule 'packed' (tree attention) cannot run {spec!r}: {reason}; use 'segmented' or 'auto'")
        self.packable = reason is None  # `auto` may choose the packed plan
        self.skip = load_mask(spec, self.options.pruning_k, self.n_layers, self.options.calibration)
        self.readout = readout
        from .plan import pair_cost_of

        self.pair_cost = pair_cost_of(model.model.config)
        self.last_plans: list[str] = []

    def describe(self) -> dict:
        options = asdict(self.options)
        options["components"] = "+".join(self.options.components)
        return {"scorer": "fastjev", **options, "skipped_layers": list(self.skip)}

    # ------------------------------------------------------------ encoding and planning

    def encode(self, question):
        """Token ids of a question; reads only its context, candidates, kind and images (never gold or labels)."""
        from scorers.prompts import encode

        candidates = question.candidates or self.options.binary_texts
        validate_candidates(candidates, question.kind)
        if question.images:
            raise ValueError(f"model {self.loaded.spec!r} cannot score images: this scorer reads text only")
        return candidates, encode(self.loaded.tokenizer, question.context, list(candidates), self.options.template,
                                  self.loaded.window)

    def plan(self, encoded, skip=None) -> tuple[str, object]:
        """(plan name, trie) for one encoded question: packed / segmented / flat."""
        from .plan import choose, plan_costs
        from .trie import CandidateTrie

        skip = self.skip if skip is None else skip
        flat = CandidateTrie.build(len(encoded.prefix), encoded.continuations, share=False)
        shared = CandidateTrie.build(len(encoded.prefix), encoded.continuations) if self.options.trie else None
        schedule = self.options.schedule
        if schedule == "auto":
            costs = plan_costs(shared, flat, self.options.max_batch_tokens, self.options.call_overhead_tokens,
                               self.pair_cost, self.packable, bool(skip))
            name = choose(costs)
        else:
            name = schedule if shared is not None else ("packed" if schedule == "packed" else "flat")
        trie = flat if name == "flat" or shared is None else shared
        return name, trie

    # ------------------------------------------------------------ scoring

    def score_encoded(self, encoded_all, skip=None):
        """`Scored` per encoded question (logits in candidate order), under the planned schedules."""
        from .packed import score_packed_many
        from .segmented import score_segmented

        skip = self.skip if skip is None else tuple(skip)
        model = self.loaded.model
        plans = [self.plan(e, skip) for e in encoded_all]
        self.last_plans = [name for name, _ in plans]
        results = [None] * len(encoded_all)
        packed = [i for i, (name, _) in enumerate(plans) if name == "packed"]
        if packed:
            items = [(encoded_all[i].prefix, plans[i][1]) for i in packed]
            for i, scored in zip(packed, score_packed_many(model, items, self.options.max_batch_tokens, skip)):
                if self.readout is not None:
                    raise ValueError("a custom readout needs schedule='segmented'")
                results[i] = scored
        for i, (name, trie) in enumerate(plans):
            if name != "packed":
                results[i] = score_segmented(model, encoded_all[i].prefix, trie, self.options.max_batch_tokens, skip,
                                             share=self.options.share, readout=self.readout)
        return results

    def decide(self, question: Question) -> Decision:
        return self.decide_many([question])[0]

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]:
        """Decisions in the same order; packed questions share forward calls."""
        prepared = [self.encode(q) for q in questions]
        scored = self.score_encoded([e for _, e in prepared])
        return [make_decision(q, candidates, result.logprobs, result.work.usage())
                for q, (candidates, _), result in zip(questions, prepared, scored)]
