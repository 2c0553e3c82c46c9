"""The scorer interface every backend implements, and the registry of backends.

A scorer turns questions into decisions in two steps, so callers can overlap them:
`prepare` (validate, render, tokenize: no model call) and `score` (run the model, apply the decision rule).
`decide_many = score(prepare(...))`; `decide` is one question. `options` is the backend's frozen,
validated options dataclass (its class is `Options`); `describe()` is what summaries record.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, fields
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

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
    # what else may use the backend: `train` (its scores are differentiable: jetgym train), `lm-eval` (lm-eval model)
    uses: ClassVar[frozenset[str]] = frozenset()
    options: Any = None

    def decide(self, question: Question) -> Decision:
        if not isinstance(question, Question):
            raise TypeError(
                f"decide takes one jetgym.scorers.Question, got {_shown(question)}: write "
                f"decide(Question(context=..., candidates=[...]))"
                + (" (a list of questions goes to decide_many)" if isinstance(question, (list, tuple)) else "")
            )
        return self.decide_many([question])[0]

    def decide_many(self, questions: Sequence[Question]) -> list[Decision]:
        """Decisions in the same order as the questions."""
        return self.score(self.prepare(check_questions(questions)))

    def describe(self) -> dict:
        """The options as a JSON-able dict (for summaries), with the dtype the model runs in."""
        described = {"scorer": self.name, **(asdict(self.options) if self.options is not None else {})}
        loaded = getattr(self, "loaded", None)
        if loaded is not None:
            described["dtype_used"] = str(loaded.model.dtype).removeprefix("torch.")
        return described


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_questions(questions: Any, call: str = "decide_many") -> list[Question]:
    """The questions of a `decide_many`/`prepare` call as a list; anything but a list of `Question`s is a
    TypeError saying what to pass."""
    if isinstance(questions, Question):
        raise TypeError(
            f"{call} takes a list of Questions, got one Question: write {call}([question]) (or decide(question))"
        )
    if isinstance(questions, (str, bytes, Mapping)) or not isinstance(questions, Iterable):
        raise TypeError(
            f"{call} takes a list of jetgym.scorers.Question, got {_shown(questions)}: write "
            f"{call}([Question(context=..., candidates=[...]), ...])"
        )
    items = list(questions)
    for index, question in enumerate(items):
        if not isinstance(question, Question):
            hint = "Question(**row)" if isinstance(question, Mapping) else "Question(context=..., candidates=[...])"
            raise TypeError(
                f"{call}: questions[{index}] must be a jetgym.scorers.Question, got {_shown(question)}: write {hint}"
            )
    return items


@contextlib.contextmanager
def naming_question(index: int, question: Question, batch: int) -> Iterator[None]:
    """Inside a batch of more than one question, a ValueError/TypeError about one of them is re-raised (same
    type) with `questions[index] (id ...)` in front of its message, so the caller knows which to fix."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if batch <= 1:
            raise
        named = f"questions[{index}]" + (f" (id {question.id!r})" if question.id is not None else "") + f": {error}"
        try:
            renamed = type(error)(named)
        except Exception:  # an exception class that takes other arguments keeps its message, with a note
            renamed = None
        if renamed is None:
            error.add_note(named)
            raise
        raise renamed from error


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
        raise ValueError(
            f"scorer {name!r} takes no option {', '.join(map(repr, unknown))}; its options: {', '.join(known)}"
        )
    raise ValueError(
        f"{prefix}{unknown[0]} does not apply to scorer={name} (its options: "
        f"{', '.join(k for k in known if k not in ('model', 'placement'))})"
    )


def available_scorers(use: str | None = None) -> list[str]:
    """The registered backends' names; with `use`, only those whose class lists it in `uses`."""
    return [n for n in SCORERS.names() if use is None or use in getattr(SCORERS.get(n), "uses", ())]
