from __future__ import annotations

from sqlalchemy import func, select

from gpulease.db.tables import Event, GpuAllocation, IdempotencyKey, Instance, Node
from gpulease.platform import Platform


def counts(p: Platform) -> dict[str, int]:
    """Row counts of everything an order writes."""
    with p.db.read() as s:
        return {
            t.__tablename__: s.scalar(select(func.count()).select_from(t)) or 0
            for t in (Instance, GpuAllocation, Event, IdempotencyKey)
        } | {"allocated_nodes": s.scalar(
            select(func.count()).select_from(Node).where(Node.instance_id.is_not(None))) or 0}


def double_allocated_gpus(p: Platform) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(
            select(GpuAllocation.gpu_id).where(GpuAllocation.released_at.is_(None))
            .group_by(GpuAllocation.gpu_id).having(func.count() > 1)))


def node_by_name(p: Platform, name: str) -> Node:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        return node


def nodes_of(p: Platform, sku: str, region: str) -> list[Node]:
    with p.db.read() as s:
        return list(s.scalars(select(Node).where(Node.sku == sku, Node.region == region,
                                                 Node.pool == "bare_metal").order_by(Node.name)))
