"""The options every scorer shares (a frozen dataclass each backend extends), validated before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .placement import Placement
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
    binary_texts: the (false, true) candidate texts of binary questions without candidates.
    """

    SCHEDULES: ClassVar[tuple[str, ...]] = ("auto",)

    model: str = "smollm2-135m-instruct"
    placement: Placement = field(default_factory=Placement)
    schedule: str = "auto"
    template: str = "chat"
    max_batch_tokens: int = 1024
    binary_texts: tuple[str, str] = DEFAULT_BINARY_TEXTS

    def __post_init__(self):
        object.__setattr__(self, "placement", Placement.of(self.placement))
        check_choice("schedule", self.schedule, self.SCHEDULES)
        check_choice("template", self.template, TEMPLATES)
        if isinstance(self.max_batch_tokens, bool) or not isinstance(self.max_batch_tokens, int):
            raise ValueError(f"max_batch_tokens must be an integer >= 1, got {self.max_batch_tokens!r}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {self.max_batch_tokens}")
        if isinstance(self.binary_texts, str):
            raise ValueError(f"binary_texts must be a (false, true) pair of texts, got the string {self.binary_texts!r}")
        object.__setattr__(self, "binary_texts", tuple(self.binary_texts))
        validate_candidates(self.binary_texts, "binary")
