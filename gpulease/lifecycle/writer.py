"""The one writer of every declared lifecycle (domain/states.py).

`transition()` alone assigns a status or a stage: it asks the resource's machine where
the event leads (an undeclared move raises InvalidTransition), writes the column (and the
reason), records the event row with its actor, then runs the side effects the families
declared for that event (lifecycle/effects.py, composed in gpulease/compose.py), in order.
Placement and the invoice run move many rows in one statement: `bulk()` gives them the
same table's guard, values and event rows.
`initial()` is the only other way a status or stage is written: a new row's first state.

A test walks the package's syntax tree and fails on any other assignment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import InstrumentedAttribute, Session

from gpulease.db.money_tables import Invoice, Lease, UsageRecord
from gpulease.db.ops_tables import Backup, PowerAction, SavedImage, Ticket
from gpulease.db.tables import AgentCommand, Base, CircuitBreaker, Instance, Node, Tenant
from gpulease.domain.lifecycle import EntryRefused, Machine
from gpulease.domain.phrases import Phrase
from gpulease.domain.states import (
    AGENT_COMMAND,
    BACKUP,
    BREAKER,
    INSTANCE,
    INSTANCE_STAGE,
    INVOICE,
    LEASE,
    NODE,
    NODE_STAGE,
    POWER_ACTION,
    SAVED_IMAGE,
    TENANT,
    TICKET,
    USAGE,
)
from gpulease.lifecycle.effects import Change
from gpulease.lifecycle.history import Happened, record_event
from gpulease.ports.records import Moves

log = logging.getLogger("gpulease.lifecycle")

# --- where each machine lives in the database ------------------------------------------------


@dataclass(frozen=True)
class Binding:
    machine: Machine[Any]
    table: type[Base]
    column: str  # status | stage
    resource: str  # the event rows' resource
    reason: str | None = None  # the column that says why
    keeps_reason: bool = False  # a move without a reason keeps the old one


BINDINGS: tuple[Binding, ...] = (
    Binding(NODE, Node, "status", "node", reason="status_reason"),
    Binding(NODE_STAGE, Node, "stage", "node"),
    Binding(INSTANCE, Instance, "status", "instance", reason="status_reason",
            keeps_reason=True),
    Binding(INSTANCE_STAGE, Instance, "stage", "instance"),
    Binding(LEASE, Lease, "status", "lease"),
    Binding(INVOICE, Invoice, "status", "invoice"),
    Binding(USAGE, UsageRecord, "status", "usage", reason="held_reason", keeps_reason=True),
    Binding(AGENT_COMMAND, AgentCommand, "status", "agent_command"),
    Binding(TENANT, Tenant, "status", "tenant", reason="status_reason"),
    Binding(BREAKER, CircuitBreaker, "status", "breaker", reason="status_reason"),
    Binding(TICKET, Ticket, "status", "ticket", reason="status_reason", keeps_reason=True),
    Binding(BACKUP, Backup, "status", "backup", reason="status_reason"),
    Binding(SAVED_IMAGE, SavedImage, "status", "saved_image", reason="status_reason"),
    Binding(POWER_ACTION, PowerAction, "status", "power_action", reason="status_reason"),
)
_BY_TABLE_AND_MACHINE = {(b.table, b.machine.name): b for b in BINDINGS}


def binding(table: type[Base], machine: Machine[Any]) -> Binding:
    try:
        return _BY_TABLE_AND_MACHINE[(table, machine.name)]
    except KeyError:
        raise LookupError(f"{table.__name__} has no {machine.name} lifecycle") from None


def _instance_of(row: Any) -> str | None:
    if isinstance(row, Instance):
        return row.id
    return getattr(row, "instance_id", None)


# --- the writer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """When a transition happens, who causes it and why (a Phrase is kept to be said in the
    reader's language); a stage that starts gets a deadline `timeout_s` away."""

    now: datetime
    actor: str
    reason: str | Phrase | None = None
    timeout_s: float | None = None


def transition(s: Session, p: Moves, row: Any, machine: Machine[Any], event: str,
               move: Move) -> Change[Moves]:
    """Move `row` along `machine` by `event`; raises InvalidTransition if the table does
    not declare it from the row's state. A stage gets a fresh start, attempt count and
    (with a timeout) deadline. A Phrase reason is kept in the history as a phrase (said
    in the reader's language); the row's reason column keeps its English."""
    now, actor, reason, timeout_s = move.now, move.actor, move.reason, move.timeout_s
    b = binding(type(row), machine)
    source = machine.parse(getattr(row, b.column))
    target = machine.step(source, event)
    if target != source and (why := machine.refusal(target, row)) is not None:
        raise EntryRefused(machine.name, target.value, why)
    setattr(row, b.column, machine.stored(target))
    if b.reason is not None and (reason is not None or not b.keeps_reason):
        setattr(row, b.reason, str(reason) if reason is not None else None)
    if hasattr(row, "updated_at"):
        row.updated_at = now
    if b.column == "stage" and target not in machine.failures:
        # a failure keeps the attempts and the last error that led to it
        _restart_stage(row, machine.stored(target) is not None, now, timeout_s)
    record_event(s, now, Happened(b.resource, row.id, b.column, _instance_of(row),
                                  source.value, target.value, reason), actor=actor)
    log.info("%s %s: %s %s -> %s (%s) by %s%s", b.resource, row.id, b.column, source.value,
             target.value, event, actor, f": {reason}" if reason else "",
             extra={"fields": {"resource": b.resource, "id": row.id, "column": b.column,
                               "from": source.value, "to": target.value, "event": event,
                               "actor": actor,
                               "reason": str(reason) if reason is not None else None}})
    change = Change(s, p, row, machine, event, source, target, now, actor, reason)
    p.effects.run(change)
    return change


def _restart_stage(row: Any, running: bool, now: datetime, timeout_s: float | None) -> None:
    row.stage_started_at = now if running else None
    row.stage_deadline = now + timedelta(seconds=timeout_s) if running and timeout_s else None
    row.attempts = 0
    row.stage_polls = 0
    row.stage_requests = 0
    row.last_error = None


def initial(table: type[Base], machine: Machine[Any], state: StrEnum | None = None,
            reason: str | None = None) -> dict[str, str | None]:
    """The column values of a new row in `state` (default: the machine's one start)."""
    b = binding(table, machine)
    if state is None:
        if len(machine.starts) != 1:
            raise ValueError(f"{machine.name} starts in one of several states; name it")
        (state,) = machine.starts
    if state not in machine.starts:
        raise ValueError(f"a new {machine.name} cannot start {state.value}")
    values = {b.column: machine.stored(state)}
    if b.reason is not None:
        values[b.reason] = reason
    return values


@dataclass(frozen=True)
class Bulk:
    """A transition for many rows in one statement: `guard` in its WHERE, `values` in its
    SET, then `events()` for the rows it returned (one INSERT)."""

    binding: Binding
    event: str
    guard: ColumnElement[bool]
    values: dict[str, str | None]
    source: str
    target: str

    def events(self, ids: Sequence[str], now: datetime, actor: str,
               instance_id: str | None = None) -> list[dict[str, object]]:
        return [{"at": now, "resource": self.binding.resource, "resource_id": i,
                 "instance_id": instance_id, "kind": self.binding.column,
                 "from_value": self.source, "to_value": self.target, "message": None,
                 "actor": actor} for i in ids]


def bulk(table: type[Base], machine: Machine[Any], event: str) -> Bulk:
    """The set-based form of one event that leads from exactly one state."""
    b = binding(table, machine)
    sources = machine.sources_of(event)
    if len(sources) != 1:
        raise ValueError(f"{machine.name} {event!r} leads from {len(sources)} states; a bulk "
                         "move names one")
    (source,) = sources
    target = machine.step(source, event)
    if target in machine.entry_checks:
        raise ValueError(f"{machine.name} {event!r} leads into {target.value}, which checks "
                         "each row before it enters: move rows one by one (transition)")
    column: InstrumentedAttribute[Any] = getattr(table, b.column)
    values: dict[str, str | None] = {b.column: machine.stored(target)}
    if b.reason is not None and not b.keeps_reason:
        values[b.reason] = None
    return Bulk(b, event, column == machine.stored(source), values, source.value, target.value)
