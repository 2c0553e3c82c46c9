"""Options of the `fastjev` scorer (no torch), validated before any model is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from scorers.placement import Placement
from scorers.jet import check_common_options
from scorers.prompts import Template
from scorers.types import DEFAULT_BINARY_TEXTS, validate_candidates

Schedule = Literal["auto", "segmented", "packed"]
SCHEDULES = ("auto", "segmented", "packed")
COMPONENTS = ("T", "S", "P")


def parse_components(components) -> tuple[str, ...]:
    """["T", "S", "P"], "T+S+P" or "TSP" -> ("T", "S", "P") in canonical order; unknown names are errors."""
    if isinstance(components, str):
        components = [c for c in components.replace("+", ",").split(",") if c.strip()]
        if len(components) == 1 and len(components[0]) > 1 and set(components[0]) <= set(COMPONENTS):
            components = list(components[0])
    names = [str(c).strip().upper() for c in components]
    unknown = [c for c in names if c not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown fastjev component {unknown[0]!r}; known: T (trie), S (shared anchoring), P (pruning)")
    return tuple(c for c in COMPONENTS if c in names)


@dataclass(frozen=True)
class FastJevOptions:
    """components: T (candidate trie), S (shared context anchoring: read-only initial states, leaf states
        dropped), P (decision-guided pruning of `pruning_k` calibrated layers in candidate paths).
    schedule: `segmented` (paper), `packed` (every trie node in one masked call; attention-only), or `auto`
        (cost rule, see `scorers.fastjev.plan`).
    pruning_k: layers skipped in candidate paths (needs P; 0 = no pruning).
    calibration: the calibration file (default docs/calibration/<model>.json).
    call_overhead_tokens: `auto`'s cost of one forward call, in token-equivalents.
    """

    model: str = "smollm2-135m-instruct"
    placement: Placement = field(default_factory=Placement)
    components: tuple[str, ...] = COMPONENTS
    schedule: Schedule = "auto"
    template: Template = "chat"
    max_batch_tokens: int = 1024
    pruning_k: int = 0
    calibration: str | None = None
    call_overhead_tokens: float = 32.0
    binary_texts: tuple[str, str] = DEFAULT_BINARY_TEXTS

    def __post_init__(self):
        object.__setattr__(self, "components", parse_components(self.components))
        check_common_options(self.schedule, SCHEDULES, self.template, self.max_batch_tokens)
        if self.pruning_k < 0:
            raise ValueError(f"pruning k must be >= 0, got {self.pruning_k}")
        if self.pruning_k > 0 and "P" not in self.components:
            raise ValueError(f"pruning k={self.pruning_k} needs component P; components are {'+'.join(self.components) or 'none'}")
        if self.call_overhead_tokens < 0:
            raise ValueError(f"call_overhead_tokens must be >= 0, got {self.call_overhead_tokens}")
        object.__setattr__(self, "binary_texts", tuple(self.binary_texts))
        validate_candidates(self.binary_texts, "binary")

    @property
    def trie(self) -> bool:
        return "T" in self.components

    @property
    def share(self) -> bool:
        return "S" in self.components
