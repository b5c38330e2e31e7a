"""The one way to change a node's or an instance's status: checks the declared transition
table and appends an event in the same transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.states import (
    InstanceStatus,
    NodeStatus,
    check_instance_transition,
    check_node_transition,
)


def record_event(
    s: Session,
    now: datetime,
    resource: str,
    resource_id: str,
    kind: str,
    *,
    instance_id: str | None = None,
    from_value: str | None = None,
    to_value: str | None = None,
    message: str | None = None,
) -> None:
    s.add(
        Event(
            at=now, resource=resource, resource_id=resource_id, instance_id=instance_id,
            kind=kind, from_value=from_value, to_value=to_value, message=message,
        )
    )


def switch_node_status(
    s: Session, node: Node, target: NodeStatus, now: datetime, reason: str | None = None
) -> None:
    current = NodeStatus(node.status)
    check_node_transition(current, target)
    if current == target and reason == node.status_reason:
        return
    node.status = target.value
    node.status_reason = reason
    node.updated_at = now
    record_event(
        s, now, "node", node.id, "status", instance_id=node.instance_id,
        from_value=current.value, to_value=target.value, message=reason,
    )


def switch_instance_status(
    s: Session, inst: Instance, target: InstanceStatus, now: datetime, reason: str | None = None
) -> None:
    current = InstanceStatus(inst.status)
    check_instance_transition(current, target)
    if current != target:
        from gpulease.services.wallet import on_instance_status

        on_instance_status(s, inst, target, now)  # holds become charges, or come back
        from gpulease.services import leases

        if target == InstanceStatus.READY:
            leases.on_delivered(s, inst, now)  # the term starts at delivery
        elif target in (InstanceStatus.RELEASED, InstanceStatus.FAILED):
            leases.on_released(s, inst, now)
    if current == target:
        return
    inst.status = target.value
    if reason is not None:
        inst.status_reason = reason
    record_event(
        s, now, "instance", inst.id, "status", instance_id=inst.id,
        from_value=current.value, to_value=target.value, message=reason,
    )


def enter_stage(
    s: Session, row: Node | Instance, stage: str | None, now: datetime, timeout_s: float,
    instance_id: str | None = None,
) -> None:
    """Move a pipeline row to `stage` with a fresh deadline and attempt count."""
    row.stage = stage
    row.stage_started_at = now if stage else None
    row.stage_deadline = now + timedelta(seconds=timeout_s) if stage else None
    row.attempts = 0
    row.stage_polls = 0
    row.last_error = None
    if stage:
        kind = "node" if isinstance(row, Node) else "instance"
        record_event(s, now, kind, row.id, "stage", instance_id=instance_id, to_value=stage)


def claim_node(
    s: Session, node_id: str, generation: int, now: datetime, *,
    to: NodeStatus | None, instance_id: str | None, expect: NodeStatus = NodeStatus.AVAILABLE,
) -> bool:
    """Claim a node for an instance in the caller's transaction, guarded by its generation.

    Returns False when another transaction changed the node since it was read (its
    generation moved): the caller retries with fresh data. `to=None` keeps the status
    (a shared container node stays available while it hosts GPU slices).
    """
    values: dict[str, object] = {"generation": generation + 1, "updated_at": now}
    if to is not None:
        check_node_transition(expect, to)
        values |= {"status": to.value, "status_reason": None, "instance_id": instance_id}
    result = s.execute(
        update(Node)
        .where(Node.id == node_id, Node.generation == generation, Node.status == expect.value,
               Node.drain_requested_at.is_(None))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if to is not None:
        record_event(s, now, "node", node_id, "status", instance_id=instance_id,
                     from_value=expect.value, to_value=to.value)
    return True
