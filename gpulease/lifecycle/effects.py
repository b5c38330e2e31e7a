"""What a transition causes elsewhere, as a registry each family fills for its own events.

A family declares its effects in its own `effects.py` (money: the charge, the lease and
the refunds of an instance's deliver, fail, release and finish; agents: a node agent's
credential ends on deploy, clean, free and fail; …) and the composition root
(`gpulease/compose.py`) hands them to `Effects` in a declared order. The writer
(`lifecycle/writer.py`) runs the effects of an event after it has moved the row and
recorded the event, in that order. So the writer imports no family, and any family may
make a transition: nothing is hidden in imports inside functions.

The registry is generic in what it hands an effect besides the row (the platform), so this
module depends on nothing above the domain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from gpulease.domain.lifecycle import Machine
from gpulease.domain.phrases import Phrase

P = TypeVar("P")


@dataclass(frozen=True)
class Change(Generic[P]):
    """One transition as it happened; what an effect is given."""

    s: Session
    p: P
    row: Any  # the table row that moved (a Node, an Instance, a Lease, …)
    machine: Machine[Any]
    event: str
    source: StrEnum
    target: StrEnum
    now: datetime
    actor: str
    reason: str | Phrase | None


@dataclass(frozen=True)
class Effect(Generic[P]):
    """`run` after `machine` moved by `event` (from one of `only_from`, when given)."""

    machine: Machine[Any]
    event: str
    run: Callable[[Change[P]], None]
    says: str  # what it does, in the docs' table
    only_from: frozenset[StrEnum] | None = None

    def applies(self, machine: Machine[Any], event: str, source: StrEnum) -> bool:
        return self.machine is machine and self.event == event and (
            self.only_from is None or source in self.only_from)


@dataclass(frozen=True)
class Effects(Generic[P]):
    """Every family's effects, in the order they run."""

    declared: tuple[Effect[P], ...]
    _by_event: dict[tuple[str, str], tuple[Effect[P], ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], list[Effect[P]]] = {}
        for effect in self.declared:
            if not effect.machine.sources_of(effect.event):
                raise ValueError(f"{effect.machine.name} declares no event {effect.event!r} "
                                 f"(effect: {effect.says})")
            index.setdefault((effect.machine.name, effect.event), []).append(effect)
        self._by_event.update({key: tuple(found) for key, found in index.items()})

    @classmethod
    def of(cls, *families: Iterable[Effect[P]]) -> Effects[P]:
        """The families' declarations, one after the other."""
        return cls(tuple(effect for family in families for effect in family))

    def __iter__(self) -> Iterator[Effect[P]]:
        return iter(self.declared)

    def run(self, change: Change[P]) -> None:
        for effect in self._by_event.get((change.machine.name, change.event), ()):
            if effect.applies(change.machine, change.event, change.source):
                effect.run(change)
