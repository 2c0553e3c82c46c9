"""The scorer interface every backend implements, and the registry of backends.

A scorer turns questions into decisions in two steps, so callers can overlap them:
`prepare` (validate, render, tokenize: no model call) and `score` (run the model, apply the decision rule).
`decide_many = score(prepare(...))`; `decide` is one question. `options` is the backend's frozen,
validated options dataclass (its class is `Options`); `describe()` is what summaries record.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, Iterable, Protocol, Sequence, runtime_checkable

from .registry import Registry
from .types import Decision, Question


@runtime_checkable
class Scorer(Protocol):
    options: Any

    def prepare(self, questions: Sequence[Question]) -> list[Any]: ...

    def score(self, prepared: Sequence[Any]) -> list[Decision]: ...

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]: ...

    def decide(self, question: Question) -> Decision: ...

    def describe(self) -> dict: ...


class ScorerBase:
    """`decide` and `decide_many` on top of a backend's `prepare` and `score`."""

    name: ClassVar[str] = ""
    Options: ClassVar[type | None] = None
    options: Any = None

    def decide(self, question: Question) -> Decision:
        return self.decide_many([question])[0]

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]:
        """Decisions in the same order as the questions."""
        return self.score(self.prepare(questions))

    def describe(self) -> dict:
        """The options as a JSON-able dict (for summaries), with the dtype the model runs in."""
        described = {"scorer": self.name, **(asdict(self.options) if self.options is not None else {})}
        loaded = getattr(self, "loaded", None)
        if loaded is not None:
            described["dtype_used"] = str(loaded.model.dtype).removeprefix("torch.")
        return described


SCORERS: Registry[type] = Registry("scorer")
SCORERS.add("jet", "jetgym.scorers.jet:JetScorer")
SCORERS.add("fastjev", "jetgym.scorers.fastjev.scorer:FastJevScorer")


def register_scorer(name: str):
    """Class decorator: make a scorer class available to `make_scorer(name, ...)`."""
    return SCORERS.register(name)


def option_names(name: str) -> tuple[str, ...] | None:
    """The option names the scorer `name` accepts (None when it declares no `Options` dataclass)."""
    options = getattr(SCORERS.get(name), "Options", None)
    return None if options is None else tuple(f.name for f in fields(options))


def make_scorer(name: str, **options) -> Scorer:
    """Build the scorer registered under `name` with its options (model, placement, schedule, ...).

    An option the scorer does not take is refused by name, before any model is loaded."""
    check_options(name, options)
    return SCORERS.get(name)(**options)


def check_options(name: str, options: Iterable[str], prefix: str | None = None) -> None:
    """Refuse option names the scorer `name` does not take (the one check, for `make_scorer` and the configs).

    prefix: where the options were set in a config (e.g. "scorer."): the error then names `scorer.<option>` and
    the options a config may set (all but model and placement)."""
    known = option_names(name)
    if known is None:
        return
    unknown = sorted(set(options) - set(known))
    if not unknown:
        return
    if prefix is None:
        raise ValueError(f"scorer {name!r} takes no option {', '.join(map(repr, unknown))}; "
                         f"its options: {', '.join(known)}")
    raise ValueError(f"{prefix}{unknown[0]} does not apply to scorer={name} (its options: "
                     f"{', '.join(k for k in known if k not in ('model', 'placement'))})")


def available_scorers() -> list[str]:
    return SCORERS.names()
