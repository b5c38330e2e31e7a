"""The container meter, a periodic job: each started GPU-hour after the first (which the
order held) is charged as it starts, under a key made from the instance and the hour, so a
worker that dies mid-write loses nothing and a rerun bills nothing twice. A running
container whose balance cannot pay its next hour is released, with the reason."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.tables import Instance
from gpulease.domain.errors import PaymentRequired
from gpulease.domain.states import INSTANCE, InstanceStatus
from gpulease.lifecycle.history import METER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.services.money.metering import HOUR, MAX_HOURS_PER_SWEEP, record
from gpulease.services.money.usage_bounds import Usage
from gpulease.worker.jobs.job import Job


def hour_key(instance_id: str, k: int) -> str:
    return f"{instance_id}:gpu-hour:{k}"


def _hours_due(ready_at: datetime, released: datetime | None, now: datetime) -> int:
    """How many hours of the container have started (hour 0 is the order's held hour)."""
    end = released or now
    if end <= ready_at:
        return 1
    started = math.ceil((end - ready_at) / HOUR)  # hours that began before `end`
    if released is None and (end - ready_at) % HOUR == timedelta(0):
        started += 1  # still running: the hour starting now has started too
    return max(started, 1)


def meter_containers(p: Platform, limit: int = 500) -> int:
    """Charge every started GPU-hour not yet charged; returns how many were recorded. A
    running container whose balance cannot pay its next hour is stopped, with the reason.
    The hours charged so far are counted on the instance, in the same transaction as the
    records, so a sweep reads one row per container, however long it has run."""
    now = p.clock.now()
    with p.db.read() as s:
        rows = s.execute(
            select(Instance.id, Instance.ready_at, Instance.release_requested_at,
                   Instance.metered_hours)
            .where(Instance.kind == "container", Instance.ready_at.is_not(None),
                   (Instance.status == InstanceStatus.READY.value)
                   | (Instance.release_requested_at >= now - timedelta(days=7)))
            .order_by(Instance.ready_at)).all()
    # Only containers with an hour to charge take a write transaction.
    ids = [i for i, ready, released, metered in rows
           if ready is not None and _hours_due(ready, released, now) - 1 > metered][:limit]
    recorded = 0
    for instance_id in ids:
        with p.db.write() as s:
            inst = s.get(Instance, instance_id, with_for_update=True)
            assert inst is not None and inst.ready_at is not None
            due = _hours_due(inst.ready_at, inst.release_requested_at, now)
            for k in range(inst.metered_hours + 1,
                           min(due, inst.metered_hours + 1 + MAX_HOURS_PER_SWEEP)):
                start = inst.ready_at + k * HOUR
                running = inst.status == InstanceStatus.READY.value
                try:
                    with s.begin_nested():
                        _, dup = record(s, p, inst, Usage(
                            hour_key(inst.id, k), "gpu_hours", Decimal(inst.gpu_count), start,
                            start + HOUR, "worker", cover=running), now)
                except PaymentRequired as exc:
                    _stop_unpaid(s, p, inst, now, str(exc))
                    break
                inst.metered_hours = k
                recorded += 0 if dup else 1
    return recorded


def _stop_unpaid(s: Session, p: Platform, inst: Instance, now: datetime, why: str) -> None:
    reason = f"stopped: the balance cannot pay the next GPU-hour. {why}"
    note(s, now, inst.id, "unpaid", reason, actor=METER)
    transition(s, p, inst, INSTANCE, "release", Move(now, actor=METER, reason=reason[:500]))
    p.wake()


JOB = Job("meter", lambda p, _owner: meter_containers(p),
          "each started container GPU-hour, charged once; unpaid containers released")
