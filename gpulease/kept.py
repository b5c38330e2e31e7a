"""What a process keeps between requests, each thing under the key of the family that makes
it (the catalog's last stock, the audit trail's writer): made on first use, closed with
the platform (gpulease/platform.py holds one)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Key(Generic[T]):
    """The name of one thing a process keeps, with its type (`Kept`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Key({self.name!r})"


class Kept:
    """What a process keeps between requests, each under the key of the family that makes
    it (the catalog's last stock, the audit trail's writer): made on first use, closed with
    the platform."""

    def __init__(self) -> None:
        self._things: dict[Key[Any], Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Key[T]) -> T | None:
        found: T | None = self._things.get(key)
        return found

    def put(self, key: Key[T], thing: T) -> None:
        self._things[key] = thing

    def made(self, key: Key[T], make: Callable[[], T]) -> T:
        """The kept thing, made now if there is none (once, whichever thread asks first)."""
        with self._lock:
            thing = self.get(key)
            if thing is None:
                thing = make()
                self.put(key, thing)
            return thing

    def close(self) -> None:
        """Close what has a `close()` (a writer drains its queue first), forget it all."""
        with self._lock:
            things, self._things = list(self._things.values()), {}
        for thing in things:
            close = getattr(thing, "close", None)
            if callable(close):
                close()
