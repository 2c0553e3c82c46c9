"""The options every scorer shares (a frozen dataclass each backend extends), validated before any model loads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from .placement import Placement
from .priors import NORMALIZATIONS
from .prompts import TEMPLATES
from .registry import check_choice
from .types import DEFAULT_BINARY_TEXTS, validate_candidates


@dataclass(frozen=True)
class ScorerOptions:
    """model: an embedded model name, a local Hugging Face folder or a hub id (a loaded model is passed to
        the scorer instead, see the backends).
    placement: a `Placement`, a device name or a {device, dtype} mapping.
    schedule: how candidates run (one of the backend's `SCHEDULES`).
    template: `chat` (the model's chat template; the candidate follows the assistant prefix) or `none`.
    max_batch_tokens: the most tokens one continuation call takes; larger sets run in groups.
    min_shared_prefix: questions scored in one call (`decide_many`, `score`) whose encoded prefixes begin
        with at least this many identical tokens, next to each other, run that common part once and each
        continues from it (e.g. the eight questions of a LIBERO frame; `jet`'s `packed` schedule and
        `fastjev`'s packed plans). Scores are unchanged; `Usage.prefix_tokens` splits the common part evenly
        over the questions that share it. 0 turns sharing off. It is also the least length `jet`'s
        `reuse_prefix` reads from the prefix kept by an earlier call (0: none).
    binary_texts: the (false, true) candidate texts of binary questions without candidates.
    normalization: the candidate-prior correction of the scores before the softmax (the raw
        log-likelihoods are kept unchanged beside them): `none` (the JET rule), `token` (mean log-prob per
        token), `byte` (per UTF-8 byte), `contextual` (divide by the candidate's likelihood under a
        content-free context) or `pmi` (subtract its log-likelihood under a neutral premise); see
        `jetgym.scorers.priors`.
    neutral_premise: the reference context of `contextual` and `pmi` (default "N/A" and "Answer:"; unused by
        the other normalizations).
    temperature: probs = softmax(scores / temperature); a temperature fitted on held-out questions
        (`jetgym-calibrate-probs`) calibrates the probabilities without changing any choice.
    adapter: a folder written by `jetgym-train` (`output_dir/adapter`), merged into the weights when the
        scorer loads `model` (`jetgym.scorers.adapters`); None: the base weights.
    """

    SCHEDULES: ClassVar[tuple[str, ...]] = ("auto",)

    model: str = "smollm2-135m-instruct"
    placement: Placement = field(default_factory=Placement)
    schedule: str = "auto"
    template: str = "chat"
    max_batch_tokens: int = 1024
    min_shared_prefix: int = 32
    binary_texts: tuple[str, str] = DEFAULT_BINARY_TEXTS
    normalization: str = "none"
    neutral_premise: str | None = None
    temperature: float = 1.0
    adapter: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "placement", Placement.of(self.placement))
        check_choice("schedule", self.schedule, self.SCHEDULES)
        check_choice("template", self.template, TEMPLATES)
        if isinstance(self.max_batch_tokens, bool) or not isinstance(self.max_batch_tokens, int):
            raise ValueError(f"max_batch_tokens must be an integer >= 1, got {self.max_batch_tokens!r}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {self.max_batch_tokens}")
        if (
            isinstance(self.min_shared_prefix, bool)
            or not isinstance(self.min_shared_prefix, int)
            or self.min_shared_prefix < 0
        ):
            raise ValueError(
                f"min_shared_prefix must be an integer >= 0 (0: no sharing), got {self.min_shared_prefix!r}"
            )
        if isinstance(self.binary_texts, str):
            raise ValueError(
                f"binary_texts must be a (false, true) pair of texts, got the string {self.binary_texts!r}"
            )
        object.__setattr__(self, "binary_texts", tuple(self.binary_texts))
        validate_candidates(self.binary_texts, "binary")
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        if self.neutral_premise is not None:
            if not isinstance(self.neutral_premise, str) or not self.neutral_premise.strip():
                raise ValueError(f"neutral_premise must be a non-empty text, got {self.neutral_premise!r}")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature <= 0
        ):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        object.__setattr__(self, "temperature", float(self.temperature))
        if self.adapter is not None and (not isinstance(self.adapter, str) or not self.adapter.strip()):
            raise ValueError(f"adapter must be the path of an adapter folder, got {self.adapter!r}")
