"""Options of the `fastjev` scorer (no torch), validated before any model is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jetgym.scorers.options import ScorerOptions

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
        raise ValueError(
            f"unknown fastjev component {unknown[0]!r}; known: T (trie), S (shared anchoring), P (pruning)"
        )
    return tuple(c for c in COMPONENTS if c in names)


@dataclass(frozen=True)
class FastJevOptions(ScorerOptions):
    """Options of the `fastjev` scorer (the shared ones are documented on `ScorerOptions`).

    components: T (candidate trie), S (shared context anchoring: read-only initial states, leaf states
        dropped), P (decision-guided pruning of `pruning_k` calibrated layers in candidate paths).
    schedule: `segmented` (paper), `packed` (every trie node in one masked call; attention-only), or `auto`
        (cost rule, see `jetgym.scorers.fastjev.plan`).
    pruning_k: layers skipped in candidate paths (needs P; 0 = no pruning).
    calibration: the calibration file (default: the user's calibration cache, then the files shipped with
        jetgym; see `jetgym.scorers.fastjev.pruning.calibration_path`).
    call_overhead_tokens: `auto`'s cost of one forward call, in token-equivalents.
    """

    SCHEDULES: ClassVar[tuple[str, ...]] = SCHEDULES

    components: tuple[str, ...] = COMPONENTS
    pruning_k: int = 0
    calibration: str | None = None
    call_overhead_tokens: float = 32.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "components", parse_components(self.components))
        if self.pruning_k < 0:
            raise ValueError(f"pruning k must be >= 0, got {self.pruning_k}")
        if self.pruning_k > 0 and "P" not in self.components:
            raise ValueError(
                f"pruning k={self.pruning_k} needs component P; components are {'+'.join(self.components) or 'none'}"
            )
        if self.call_overhead_tokens < 0:
            raise ValueError(f"call_overhead_tokens must be >= 0, got {self.call_overhead_tokens}")

    @property
    def trie(self) -> bool:
        return "T" in self.components

    @property
    def share(self) -> bool:
        return "S" in self.components
