"""Declared lifecycles: a machine is its states, each with a line saying what it means,
and its transitions, each named by the event that causes it. Code asks the machine where
an event leads from a state; a move the table does not declare is refused in one place.

A transition whose target is None keeps the state (a note on the resource: a drain
requested, a reason changed); it is still recorded. A state stored as NULL (a pipeline
between runs) is the machine's `idle` state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class InvalidTransition(Exception):
    """The event is not declared from the resource's current state."""

    def __init__(self, machine: str, current: str, event: str, allowed: Iterable[str]) -> None:
        options = ", ".join(sorted(allowed)) or "none"
        super().__init__(f"{machine}: no {event!r} from {current} (events from {current}: "
                         f"{options})")
        self.machine, self.current, self.event = machine, current, event


class EntryRefused(Exception):
    """The row may not enter the state the event leads to (the machine's entry check)."""

    def __init__(self, machine: str, target: str, why: str) -> None:
        super().__init__(f"{machine}: not {target}: {why}")
        self.machine, self.target, self.why = machine, target, why


@dataclass(frozen=True)
class Transition(Generic[S]):
    event: str
    sources: frozenset[S]
    target: S | None  # None: the state stays (recorded, with its reason)
    meaning: str

    def target_from(self, source: S) -> S:
        return source if self.target is None else self.target


def move(event: str, sources: Iterable[S], target: S | None, meaning: str) -> Transition[S]:
    """One row of a transition table."""
    return Transition(event, frozenset(sources), target, meaning)


@dataclass(frozen=True)
class Machine(Generic[S]):
    name: str
    states: Mapping[S, str]  # every state with what it means
    starts: frozenset[S]  # states a new resource may start in
    transitions: tuple[Transition[S], ...]
    idle: S | None = None  # the state stored as NULL
    waits: frozenset[S] = frozenset()  # waiting on something outside, under a deadline
    failures: frozenset[S] = frozenset()  # says why in the reason
    finals: frozenset[S] = frozenset()
    # A state some rows may not enter, whatever the event: the check reads the row and
    # says why not (None: it may). The writer asks before every move into the state.
    entry_checks: Mapping[S, Callable[[Any], str | None]] = field(default_factory=dict)
    _index: dict[tuple[S, str], Transition[S]] = field(default_factory=dict, init=False,
                                                       repr=False, compare=False)

    def __post_init__(self) -> None:
        known = set(self.states)
        for state, meaning in self.states.items():
            if not meaning.strip():
                raise ValueError(f"{self.name}: state {state} says nothing")
        for group in (self.starts, self.waits, self.failures, self.finals):
            if not group <= known:
                raise ValueError(f"{self.name}: unknown states {sorted(group - known)}")
        if self.idle is not None and self.idle not in known:
            raise ValueError(f"{self.name}: unknown idle state {self.idle}")
        for t in self.transitions:
            ends = {t.target} if t.target is not None else set()
            if not t.sources or not (t.sources | ends) <= known:
                raise ValueError(f"{self.name}: {t.event} names unknown states")
            if t.sources & self.finals:
                raise ValueError(f"{self.name}: {t.event} leaves a final state")
            for source in t.sources:
                if (source, t.event) in self._index:
                    raise ValueError(f"{self.name}: two {t.event!r} moves from {source}")
                self._index[(source, t.event)] = t
        unreachable = known - self.reachable()
        if unreachable:
            raise ValueError(f"{self.name}: unreachable states {sorted(unreachable)}")

    # -- asking the table ----------------------------------------------------------------
    def transition(self, current: S, event: str) -> Transition[S]:
        try:
            return self._index[(current, event)]
        except KeyError:
            raise InvalidTransition(self.name, current.value, event,
                                    self.events_from(current)) from None

    def step(self, current: S, event: str) -> S:
        """Where `event` leads from `current`; raises InvalidTransition if undeclared."""
        return self.transition(current, event).target_from(current)

    def refusal(self, target: S, row: Any) -> str | None:
        """Why `row` may not enter `target` (its entry check), or None."""
        check = self.entry_checks.get(target)
        return check(row) if check is not None else None

    def allows(self, current: S, event: str) -> bool:
        return (current, event) in self._index

    def events_from(self, current: S) -> list[str]:
        return sorted({e for (s, e) in self._index if s == current})

    def sources_of(self, event: str) -> frozenset[S]:
        return frozenset(s for (s, e) in self._index if e == event)

    def events(self) -> list[str]:
        seen: dict[str, None] = {}
        for t in self.transitions:
            seen.setdefault(t.event)
        return list(seen)

    def reachable(self) -> set[S]:
        found, todo = set(self.starts), list(self.starts)
        while todo:
            state = todo.pop()
            for (source, _), t in self._index.items():
                if source == state:
                    target = t.target_from(source)
                    if target not in found:
                        found.add(target)
                        todo.append(target)
        return found

    # -- storage ---------------------------------------------------------------------------
    def parse(self, stored: str | None) -> S:
        """The state a stored value names (NULL is the idle state)."""
        if stored is None:
            if self.idle is None:
                raise ValueError(f"{self.name}: no state is stored as NULL")
            return self.idle
        for state in self.states:
            if state.value == stored:
                return state
        raise ValueError(f"{self.name}: unknown state {stored!r}")

    def stored(self, state: S) -> str | None:
        return None if state == self.idle else state.value


# --- rendering: the tables in the docs are generated from the declarations ---------------

def _label(state: StrEnum, machine: Machine[S]) -> str:
    return "idle" if state == machine.idle else state.value


def mermaid(machine: Machine[S]) -> str:
    """A Mermaid state diagram of the machine. Transitions that keep the state (notes such
    as a drain requested) are left to the table."""
    lines = ["stateDiagram-v2"]
    for start in sorted(machine.starts, key=list(machine.states).index):
        lines.append(f"    [*] --> {_label(start, machine)}")
    for t in machine.transitions:
        if t.target is None:
            continue
        for source in sorted(t.sources, key=list(machine.states).index):
            target = t.target_from(source)
            lines.append(f"    {_label(source, machine)} --> {_label(target, machine)}: "
                         f"{t.event}")
    for final in sorted(machine.finals, key=list(machine.states).index):
        lines.append(f"    {_label(final, machine)} --> [*]")
    return "\n".join(lines)


def markdown(machine: Machine[S]) -> str:
    """The machine's states and transitions as two Markdown tables."""
    order = list(machine.states)
    out = ["| state | kind | meaning |", "|---|---|---|"]
    for state, meaning in machine.states.items():
        kinds = [k for k, group in (("start", machine.starts), ("wait", machine.waits),
                                    ("failure", machine.failures), ("final", machine.finals))
                 if state in group]
        if state == machine.idle:
            kinds.append("idle (stored as NULL)")
        out.append(f"| `{_label(state, machine)}` | {', '.join(kinds)} | {meaning} |")
    out += ["", "| event | from | to | meaning |", "|---|---|---|---|"]
    for t in machine.transitions:
        sources = ", ".join(f"`{_label(s, machine)}`" for s in sorted(t.sources, key=order.index))
        target = "(stays)" if t.target is None else f"`{_label(t.target, machine)}`"
        out.append(f"| `{t.event}` | {sources} | {target} | {t.meaning} |")
    return "\n".join(out)
