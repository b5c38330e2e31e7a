"""Tenant-scoped queries. Every read of a tenant's resource goes through here, so another
tenant's instance is simply not found (404), never forbidden (which would confirm it)."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Gpu, GpuAllocation, Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import NotFound


def instances_query(actor: Principal) -> Select[Instance]:
    q = select(Instance)
    if not actor.is_operator:
        q = q.where(Instance.tenant_id == actor.tenant_id)
    return q


def get_instance(s: Session, actor: Principal, instance_id: str, *, lock: bool = False) -> Instance:
    q = instances_query(actor).where(Instance.id == instance_id)
    if lock:
        q = q.with_for_update()
    inst = s.scalar(q)
    if inst is None:
        raise NotFound(
            f"No instance {instance_id} in your account; `gpulease instances` lists yours."
        )
    return inst


def instance_allocations(s: Session, instance_id: str) -> list[tuple[Node, list[int], bool]]:
    """Every node the instance held (now or before), its GPU indices, and whether held now."""
    rows = s.execute(
        select(Node, Gpu.index, GpuAllocation.released_at.is_(None))
        .join(GpuAllocation, GpuAllocation.node_id == Node.id)
        .join(Gpu, Gpu.id == GpuAllocation.gpu_id)
        .where(GpuAllocation.instance_id == instance_id)
        .order_by(Node.name, Gpu.index)
    )
    out: dict[str, tuple[Node, list[int], bool]] = {}
    for node, index, active in rows:
        out.setdefault(node.id, (node, [], bool(active)))[1].append(index)
    return list(out.values())


def instance_events(s: Session, instance_id: str) -> list[Event]:
    return list(
        s.scalars(select(Event).where(Event.instance_id == instance_id)
                  .order_by(Event.at, Event.id))
    )


def bound_nodes(s: Session, instance_id: str, *, lock: bool = False) -> list[Node]:
    q = select(Node).where(Node.instance_id == instance_id).order_by(Node.name)
    if lock:
        q = q.with_for_update()
    return list(s.scalars(q))
