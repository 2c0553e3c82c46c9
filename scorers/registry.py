"""A small typed registry: register by decorator or by a cheap "module:attribute" string, look up by
name with did-you-mean errors. String entries are imported only when first used."""

from __future__ import annotations

import difflib
import importlib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def check_choice(what: str, value, known) -> None:
    """ValueError naming the known values when `value` is not one of them."""
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")


def import_target(target: str):
    """The object named by "package.module:attribute"."""
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"a registry target is 'module:attribute', got {target!r}")
    return getattr(importlib.import_module(module), attribute)


class Registry(Generic[T]):
    """Maps names to entries (objects or "module:attribute" strings). Duplicate and unknown names are errors."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T | str] = {}

    def add(self, name: str, entry: T | str) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(entry: T) -> T:
            self.add(name, entry)
            return entry

        return decorator

    def get(self, name: str) -> T:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            close = difflib.get_close_matches(str(name), self._entries, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise LookupError(f"unknown {self.kind} {name!r}; known: {known}.{hint}")
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = import_target(entry)
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)
