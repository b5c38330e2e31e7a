"""The one writer of every declared lifecycle (domain/states.py), and the one table of
what a transition causes elsewhere.

`transition()` alone assigns a status or a stage: it asks the resource's machine where
the event leads (an undeclared move raises InvalidTransition), writes the column (and the
reason), records the event row with its actor, then runs the side effects declared for
that event in EFFECTS, in order. Placement and the invoice run move many rows in one
statement: `bulk()` gives them the same table's guard, values and event rows.
`initial()` is the only other way a status or stage is written: a new row's first state.

A test walks the package's syntax tree and fails on any other assignment.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from gpulease.db.money_tables import Invoice, Lease, UsageRecord
from gpulease.db.ops_tables import Backup, SavedImage, Ticket
from gpulease.db.tables import AgentCommand, Base, CircuitBreaker, Instance, Node, Tenant
from gpulease.domain.leases import term_end
from gpulease.domain.lifecycle import Machine
from gpulease.domain.phrases import Phrase, phrase
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
    SAVED_IMAGE,
    TENANT,
    TICKET,
    USAGE,
    InstanceStatus,
    LeaseStatus,
)
from gpulease.lifecycle.history import record_event
from gpulease.platform import Platform
from gpulease.services.agents.credentials import revoke_credential
from gpulease.services.money import addons, lease_periods, wallet

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
class Change:
    """One transition as it happened; what side effects are given."""

    s: Session
    p: Platform
    row: Any
    machine: Machine[Any]
    event: str
    source: StrEnum
    target: StrEnum
    now: datetime
    actor: str
    reason: str | Phrase | None


def transition(s: Session, p: Platform, row: Any, machine: Machine[Any], event: str,
               now: datetime, *, actor: str, reason: str | Phrase | None = None,
               timeout_s: float | None = None) -> Change:
    """Move `row` along `machine` by `event`; raises InvalidTransition if the table does
    not declare it from the row's state. A stage gets a fresh start, attempt count and
    (with `timeout_s`) deadline. A Phrase reason is kept in the history as a phrase (said
    in the reader's language); the row's reason column keeps its English."""
    b = binding(type(row), machine)
    source = machine.parse(getattr(row, b.column))
    target = machine.step(source, event)
    setattr(row, b.column, machine.stored(target))
    if b.reason is not None and (reason is not None or not b.keeps_reason):
        setattr(row, b.reason, str(reason) if reason is not None else None)
    if hasattr(row, "updated_at"):
        row.updated_at = now
    if b.column == "stage" and target not in machine.failures:
        # a failure keeps the attempts and the last error that led to it
        _restart_stage(row, machine.stored(target) is not None, now, timeout_s)
    record_event(s, now, b.resource, row.id, b.column, actor=actor,
                 instance_id=_instance_of(row), from_value=source.value,
                 to_value=target.value, message=reason)
    log.info("%s %s: %s %s -> %s (%s) by %s%s", b.resource, row.id, b.column, source.value,
             target.value, event, actor, f": {reason}" if reason else "",
             extra={"fields": {"resource": b.resource, "id": row.id, "column": b.column,
                               "from": source.value, "to": target.value, "event": event,
                               "actor": actor,
                               "reason": str(reason) if reason is not None else None}})
    change = Change(s, p, row, machine, event, source, target, now, actor, reason)
    for effect in EFFECTS:
        if effect.machine is machine and effect.event == event and (
                effect.only_from is None or source in effect.only_from):
            effect.run(change)
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
    column: InstrumentedAttribute[Any] = getattr(table, b.column)
    values: dict[str, str | None] = {b.column: machine.stored(target)}
    if b.reason is not None and not b.keeps_reason:
        values[b.reason] = None
    return Bulk(b, event, column == machine.stored(source), values, source.value, target.value)


# --- what a transition causes elsewhere --------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    machine: Machine[Any]
    event: str
    run: Callable[[Change], None]
    says: str
    only_from: frozenset[StrEnum] | None = None


def _charge_first_period(c: Change) -> None:
    inst: Instance = c.row
    term = inst.term if inst.kind in LEASED_KINDS else "hour"
    extras = [x.line() for x in addons.period_lines(c.s, c.p, inst, c.now, inst.term)]
    wallet.charge_hold(c.s, inst, c.now, term_end(c.now, term, 1, c.p.settings.zone), extras)


def _start_lease(c: Change) -> None:
    inst: Instance = c.row
    if inst.kind not in LEASED_KINDS:
        return
    held = wallet.first_hold(c.s, inst.id)
    if held is None:  # ordered before wallets existed: nothing held, no lease
        return
    extras = sum((x.amount for x in addons.period_lines(c.s, c.p, inst, c.now, inst.term)),
                 Decimal(0))
    lease = Lease(id=uuid.uuid4().hex[:16], instance_id=inst.id, tenant_id=inst.tenant_id,
                  term=inst.term, unit_price=held - extras, starts_at=c.now,
                  ends_at=term_end(c.now, inst.term, 1, c.p.settings.zone), auto_renew=False,
                  periods=1, reminders_sent="", updated_at=c.now, **initial(Lease, LEASE))
    c.s.add(lease)
    c.s.flush()  # the period refers to it
    lease_periods.start(c.s, lease, c.p.settings.zone, price=held)  # with its add-ons


def _credit_late_delivery(c: Change) -> None:
    wallet.credit_late_delivery(c.s, c.row, c.now, c.p.settings.delivery_sla_s)


def _return_hold(c: Change) -> None:
    inst: Instance = c.row
    if inst.ready_at is None:
        wallet.return_hold(c.s, inst, c.now)


def _hand_to_worker(c: Change) -> None:
    inst: Instance = c.row
    inst.release_requested_at = c.now
    inst.next_attempt_at = c.now
    inst.lock_token = None  # a worker mid-step on this row must not overwrite the release
    inst.lock_expires_at = None


def _open_lease(c: Change) -> Lease | None:
    lease = c.s.scalar(select(Lease).where(Lease.instance_id == c.row.id).with_for_update())
    return lease if lease is not None and lease.status != LeaseStatus.ENDED.value else None


def _end_lease_early(c: Change) -> None:
    lease = _open_lease(c)
    if lease is None:
        return
    if lease.status == LeaseStatus.ACTIVE.value and c.now < lease.ends_at:
        granted = lease_periods.refund_granted_by(c.s, c.row.id)
        if granted is not None:  # a fault the platform could not replace
            lease_periods.refund_unused(c.s, c.row, lease, c.now,
                                        phrase("ticket {ticket}: no spare", ticket=granted),
                                        actor=c.actor)
        else:
            lease_periods.refund_unstarted(
                c.s, c.row, lease, c.p.catalog.pricing.early_termination_fee_percent,
                c.now, actor=c.actor)
    transition(c.s, c.p, lease, LEASE, "end", c.now, actor=c.actor, reason=c.reason)


def _end_lease(c: Change) -> None:
    lease = _open_lease(c)
    if lease is not None:
        transition(c.s, c.p, lease, LEASE, "end", c.now, actor=c.actor, reason=c.reason)


def _release_after_grace(c: Change) -> None:
    inst = c.s.get(Instance, c.row.instance_id, with_for_update=True)
    if inst is not None and inst.status == InstanceStatus.READY.value:
        transition(c.s, c.p, inst, INSTANCE, "release", c.now, actor=c.actor,
                   reason=phrase("lease expired and grace ended"))


def _revoke_agent(c: Change) -> None:
    revoke_credential(c.s, c.row.id, c.now)


LEASED_KINDS = ("bare_metal", "cluster")
IS, L = InstanceStatus, LeaseStatus

EFFECTS: tuple[Effect, ...] = (
    Effect(INSTANCE, "deliver", _charge_first_period,
           "the order's hold becomes the charge for its first period"),
    Effect(INSTANCE, "deliver", _start_lease,
           "bare metal and clusters: the lease term starts now, at the price the order held "
           "(its first period with the add-ons)"),
    Effect(INSTANCE, "deliver", _credit_late_delivery,
           "delivered later than the SLA: a credit on the first period, by the documented "
           "rule"),
    Effect(INSTANCE, "fail", _return_hold, "never delivered: the order's hold comes back"),
    Effect(INSTANCE, "release", _hand_to_worker,
           "the worker takes it at once (a worker mid-step loses its lock)"),
    Effect(INSTANCE, "release", _end_lease_early,
           "handed back before the term ends: the periods not begun refunded, less the fee; "
           "the lease ends", only_from=frozenset({IS.READY})),
    Effect(INSTANCE, "finish", _return_hold,
           "released before delivery: the order's hold comes back"),
    Effect(INSTANCE, "finish", _end_lease, "the lease ends, if it had not"),
    Effect(NODE, "deploy", _revoke_agent,
           "a new tenant's machine: any node agent credential from before ends (the deploy's "
           "agent enrolls with the one-time token on its config drive)"),
    Effect(NODE, "clean", _revoke_agent,
           "handed back: the tenant's agent credential ends (the cleaning ramdisk enrolls "
           "afresh)"),
    Effect(NODE, "free", _revoke_agent, "erased: the cleaning ramdisk's credential ends"),
    Effect(NODE, "fail", _revoke_agent,
           "to maintenance: no agent credential stays (an operator mints a new token)"),
    Effect(LEASE, "end", _release_after_grace,
           "grace ran out: the instance is released and its disks erased",
           only_from=frozenset({L.GRACE})),
)
