"""A small typed registry: register by decorator, look up by name with did-you-mean errors."""

from __future__ import annotations

import difflib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def check_choice(what: str, value, known) -> None:
    """ValueError naming the known values when `value` is not one of them."""
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")


class Registry(Generic[T]):
    """Maps names to factories. Duplicate names and unknown names are errors."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return decorator

    def get(self, name: str) -> T:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise LookupError(f"unknown {self.kind} {name!r}; known: {known}.{hint}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)


SCORERS: Registry[Callable] = Registry("scorer")


def register_scorer(name: str):
    """Class decorator: make a scorer available to `make_scorer(name, ...)`."""
    return SCORERS.register(name)


def make_scorer(name: str, **options):
    """Build the scorer registered under `name` with its options (model, schedule, template, ...)."""
    return SCORERS.get(name)(**options)


def available_scorers() -> list[str]:
    return SCORERS.names()
