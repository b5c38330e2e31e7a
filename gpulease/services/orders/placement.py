"""Placement: which nodes and GPUs an order gets, claimed in the caller's transaction so
that nothing is ever held twice.

The guards:
- a free node is claimed by one UPDATE that re-checks it is still available and bumps its
  generation; on PostgreSQL the row is picked with FOR UPDATE SKIP LOCKED, so concurrent
  orders take different nodes instead of colliding on the same one (SQLite serializes
  writers with BEGIN IMMEDIATE, so there is nothing to skip);
- claims that start from an earlier read (shared container hosts, replacements) are
  conditional on the generation read with it, and update nothing when it moved;
- the partial unique index on active GPU allocations makes the database refuse a GPU
  held twice.

The hot path is plain SQL expressions on the transaction's connection, built once: an
order is a handful of statements, and no ORM unit of work runs for it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable

from gpulease.db.repositories import NODE_BRIEF
from gpulease.db.tables import Event, Gpu, GpuAllocation, Instance, Node, UtcDateTime
from gpulease.domain.states import NODE
from gpulease.lifecycle.writer import bulk

CANDIDATES = 64  # free nodes read per claim that starts from a read


class Raced(Exception):
    """What was read changed before the claim; retry the whole transaction."""


@dataclass
class Claimed:
    """A node as the order's answer shows it, straight from the claiming statement."""

    id: str
    name: str
    status: str
    stage: str | None
    instance_id: str | None
    ip_address: str | None
    bmc_driver: str
    agent_kind: str
    gpus: list[int] = field(default_factory=list)


_CLAIMED = NODE_BRIEF  # the claim returns what an instance's view shows of its nodes


# The node lifecycle's `allocate` (available -> allocated), set-based: its guard in the
# WHERE, its values in the SET, its event rows beside the claim.
ALLOCATE = bulk(Node, NODE, "allocate")


def _free_bare_metal(sku: ColumnElement[str] | str,
                     region: ColumnElement[str] | str) -> ColumnElement[bool]:
    return and_(Node.sku == sku, Node.region == region, Node.pool == "bare_metal",
                ALLOCATE.guard, Node.drain_requested_at.is_(None))


def _claim_update(where: ColumnElement[bool]) -> Executable:
    return (
        update(Node)
        .where(where, ALLOCATE.guard, Node.drain_requested_at.is_(None))
        .values(**ALLOCATE.values, instance_id=bindparam("claim_instance"),
                generation=Node.generation + 1,
                updated_at=bindparam("claim_at", type_=UtcDateTime()))
        .returning(*_CLAIMED)
    )


def _pick_one(skip_locked: bool) -> ColumnElement[str]:
    # `=` on a one-row subquery: PostgreSQL runs it once and locks exactly that row.
    return (select(Node.id).where(_free_bare_metal(bindparam("want_sku"), bindparam("want_region")))
            .limit(1).with_for_update(skip_locked=skip_locked).scalar_subquery())


_CLAIM_ONE_SKIPPING = _claim_update(Node.id == _pick_one(skip_locked=True))
_CLAIM_ONE_WAITING = _claim_update(Node.id == _pick_one(skip_locked=False))
_CLAIM_LISTED = _claim_update(Node.id.in_(bindparam("claim_ids", expanding=True)))


# The nodes' GPUs, each with whether it is held now. The check sits in the select list, so
# every database runs it as one probe per GPU into the partial unique index of active
# allocations, whatever its statistics say (as a join, a stale estimate made PostgreSQL
# hash every active allocation for each order).
_GPUS_OF_NODES = (
    select(Gpu.id, Gpu.node_id, Gpu.index,
           select(GpuAllocation.id).where(GpuAllocation.gpu_id == Gpu.id,
                                          GpuAllocation.released_at.is_(None))
           .correlate(Gpu).limit(1).scalar_subquery())
    .where(Gpu.node_id.in_(bindparam("alloc_nodes", expanding=True)))
    .order_by(Gpu.node_id, Gpu.index)
)
_INSERT_ALLOCATIONS = insert(GpuAllocation)


def allocate_gpus(conn: Connection, node_ids: list[str], instance_id: str, now: datetime,
                  count: int | None = None) -> dict[str, list[int]]:
    """Hold every free GPU of the nodes, or the first `count` free of one node's: read
    them with their indices, then insert the allocations in one statement; returns the
    indices held per node. The unique index refuses a GPU another order took in between."""
    rows = conn.execute(_GPUS_OF_NODES, {"alloc_nodes": node_ids}).all()
    free = [(gpu_id, node_id, index) for gpu_id, node_id, index, held in rows if held is None]
    if count:
        if len(free) < count:
            raise Raced()
        free = free[:count]
    if free:
        conn.execute(_INSERT_ALLOCATIONS, [
            {"gpu_id": gpu_id, "node_id": node_id, "instance_id": instance_id,
             "created_at": now} for gpu_id, node_id, _ in free])
    held: dict[str, list[int]] = {n: [] for n in node_ids}
    for _, node_id, index in free:
        held[node_id].append(index)
    return held


def node_claim_events(claimed: list[Claimed], instance_id: str, now: datetime,
                      actor: str) -> list[dict[str, object]]:
    """The history rows of nodes claimed for an instance (available → allocated)."""
    return ALLOCATE.events([c.id for c in claimed], now, actor, instance_id)


def claim_bare_metal(conn: Connection, sku: str, region: str, instance_id: str,
                     now: datetime) -> Claimed | None:
    """Claim one free node of the offer; None when none is free. Concurrent orders skip
    the rows others are claiming; only when every free row is being claimed does this
    wait, to learn whether one comes free again (an order that rolls back)."""
    params = {"want_sku": sku, "want_region": region, "claim_instance": instance_id,
              "claim_at": now}
    row = conn.execute(_CLAIM_ONE_SKIPPING, params).first()
    if row is None and conn.dialect.name == "postgresql":
        row = conn.execute(_CLAIM_ONE_WAITING, params).first()
    return Claimed(*row) if row is not None else None


def free_per_fabric(s: Session, sku: str, region: str) -> dict[str, int]:
    rows = s.execute(select(Node.fabric_id, func.count())
                     .where(_free_bare_metal(sku, region), Node.fabric_id.is_not(None))
                     .group_by(Node.fabric_id))
    return {fabric: n for fabric, n in rows if fabric}


def pick_fabric(groups: dict[str, int], nodes: int) -> str | None:
    """Best fit: the smallest fabric group that holds the cluster keeps big groups whole."""
    fitting = [f for f, n in groups.items() if n >= nodes]
    if not fitting:
        return None
    smallest = min(groups[f] for f in fitting)
    return random.choice([f for f in fitting if groups[f] == smallest])


def claim_cluster(conn: Connection, sku: str, region: str, fabric: str, nodes: int,
                  instance_id: str, now: datetime) -> list[Claimed]:
    """Claim `nodes` free nodes of one fabric, all or none. They are locked in id order, so
    two clusters wanting the same fabric queue rather than deadlock; nodes another order
    took meanwhile fail the lock's re-check and the next free ones are taken."""
    ids = conn.execute(
        select(Node.id).where(_free_bare_metal(sku, region), Node.fabric_id == fabric)
        .order_by(Node.id).limit(nodes).with_for_update()).scalars().all()
    if len(ids) < nodes:
        raise Raced()  # taken since the count: count again
    rows = conn.execute(_CLAIM_LISTED, {"claim_ids": list(ids), "claim_instance": instance_id,
                                        "claim_at": now}).all()
    if len(rows) != nodes:
        raise Raced()
    return sorted((Claimed(*r) for r in rows), key=lambda c: c.name)


def _free_nodes_query(inst: Instance, failed: Node) -> Select[str, int]:
    q = select(Node.id, Node.generation).where(_free_bare_metal(inst.sku, inst.region),
                                               Node.id != failed.id)
    if inst.kind == "cluster":
        q = q.where(Node.fabric_id == inst.fabric_id)
    return q.limit(CANDIDATES)


def _claim_read_node(s: Session, node_id: str, generation: int,
                     values: dict[str, object]) -> bool:
    """Update a node read earlier, only if nobody changed it since (its generation) and it
    is still free; False means retry with fresh data."""
    result = s.execute(
        update(Node)
        .where(Node.id == node_id, Node.generation == generation, ALLOCATE.guard,
               Node.drain_requested_at.is_(None))
        .values(generation=generation + 1, **values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined,no-any-return]


def claim_node(s: Session, node_id: str, generation: int, now: datetime, *, actor: str,
               instance_id: str) -> bool:
    """Claim a node read earlier for an instance (available -> allocated, recorded), in the
    caller's transaction."""
    if not _claim_read_node(s, node_id, generation, {
            **ALLOCATE.values, "instance_id": instance_id, "updated_at": now}):
        return False
    s.execute(insert(Event), ALLOCATE.events([node_id], now, actor, instance_id))
    return True


def claim_replacement(s: Session, now: datetime, inst: Instance, failed: Node, *,
                      actor: str) -> Node | None:
    """In the caller's transaction, claim a free node of the instance's offer (on its fabric
    for a cluster) to replace one that failed during delivery; None when none is free."""
    rows = list(s.execute(_free_nodes_query(inst, failed)).all())
    random.shuffle(rows)
    for node_id, gen in rows:
        if claim_node(s, node_id, gen, now, actor=actor, instance_id=inst.id):
            allocate_gpus(s.connection(), [node_id], inst.id, now)
            return s.get(Node, node_id, populate_existing=True)
    return None


def claim_container_slice(s: Session, sku: str, region: str, gpus: int, instance_id: str,
                          now: datetime, free: dict[str, int]) -> Claimed | None:
    """Hold `gpus` GPUs of one shared host (best fit: the busiest host that has room);
    None when no host has room. `free` is the free-GPU count per available host."""
    nodes = {
        n.id: n for n in s.scalars(select(Node).where(
            Node.id.in_(list(free)), Node.sku == sku, Node.region == region))
    } if free else {}
    fitting = [(free[n], n) for n in nodes if free[n] >= gpus]
    if not fitting:
        return None
    least = min(f for f, _ in fitting)
    node = nodes[random.choice([n for f, n in fitting if f == least])]
    # The host stays available while it hosts slices; the generation still orders claims.
    if not _claim_read_node(s, node.id, node.generation, {"updated_at": now}):
        raise Raced()
    held = allocate_gpus(s.connection(), [node.id], instance_id, now, gpus)
    return Claimed(node.id, node.name, node.status, node.stage, node.instance_id,
                   node.ip_address, node.bmc_driver, node.agent_kind, held[node.id])

