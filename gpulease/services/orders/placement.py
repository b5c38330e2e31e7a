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
    select,
)
from sqlalchemy.orm import Session

from gpulease.db.repositories import NODE_BRIEF
from gpulease.db.tables import Instance, Node
from gpulease.lifecycle.binding import (
    ALLOCATE,
    CLAIMABLE,
    Raced,
    bind_read,
    bind_update,
    hold_gpus,
    touch_read,
)

CANDIDATES = 64  # free nodes read per claim that starts from a read


@dataclass(frozen=True)
class Offered:
    """Where a claim takes from: the offer's SKU in its region."""

    sku: str
    region: str


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
    ssh_endpoint: str | None = None
    gpus: list[int] = field(default_factory=list)


_CLAIMED = NODE_BRIEF  # the claim returns what an instance's view shows of its nodes


def _free_bare_metal(sku: ColumnElement[str] | str,
                     region: ColumnElement[str] | str) -> ColumnElement[bool]:
    return and_(Node.sku == sku, Node.region == region, Node.pool == "bare_metal", CLAIMABLE)


def _pick_one(skip_locked: bool) -> ColumnElement[str]:
    # `=` on a one-row subquery: PostgreSQL runs it once and locks exactly that row.
    return (select(Node.id).where(_free_bare_metal(bindparam("want_sku"), bindparam("want_region")))
            .limit(1).with_for_update(skip_locked=skip_locked).scalar_subquery())


_CLAIM_ONE_SKIPPING = bind_update(Node.id == _pick_one(skip_locked=True))
_CLAIM_ONE_WAITING = bind_update(Node.id == _pick_one(skip_locked=False))
_CLAIM_LISTED = bind_update(Node.id.in_(bindparam("claim_ids", expanding=True)))


def node_claim_events(claimed: list[Claimed], instance_id: str, now: datetime,
                      actor: str) -> list[dict[str, object]]:
    """The history rows of nodes claimed for an instance (available → allocated)."""
    return ALLOCATE.events([c.id for c in claimed], now, actor, instance_id)


def claim_bare_metal(conn: Connection, offered: Offered, instance_id: str,
                     now: datetime) -> Claimed | None:
    """Claim one free node of the offer; None when none is free. Concurrent orders skip
    the rows others are claiming; only when every free row is being claimed does this
    wait, to learn whether one comes free again (an order that rolls back)."""
    params = {"want_sku": offered.sku, "want_region": offered.region,
              "claim_instance": instance_id,
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


def claim_cluster(conn: Connection, offered: Offered, fabric: str, nodes: int,
                  instance_id: str, now: datetime) -> list[Claimed]:
    """Claim `nodes` free nodes of one fabric, all or none. They are locked in id order, so
    two clusters wanting the same fabric queue rather than deadlock; nodes another order
    took meanwhile fail the lock's re-check and the next free ones are taken."""
    ids = conn.execute(
        select(Node.id).where(_free_bare_metal(offered.sku, offered.region),
                              Node.fabric_id == fabric)
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


def claim_replacement(s: Session, now: datetime, inst: Instance, failed: Node, *,
                      actor: str) -> Node | None:
    """In the caller's transaction, claim a free node of the instance's offer (on its fabric
    for a cluster) to replace one that failed during delivery; None when none is free."""
    rows = list(s.execute(_free_nodes_query(inst, failed)).all())
    random.shuffle(rows)
    for node_id, gen in rows:
        if bind_read(s, node_id, gen, now, actor=actor, instance_id=inst.id):
            hold_gpus(s.connection(), [node_id], inst.id, now)
            return s.get(Node, node_id, populate_existing=True)
    return None


def claim_container_slice(s: Session, offered: Offered, gpus: int, instance_id: str,
                          now: datetime, free: dict[str, int]) -> Claimed | None:
    """Hold `gpus` GPUs of one shared host (best fit: the busiest host that has room);
    None when no host has room. `free` is the free-GPU count per available host."""
    nodes = {
        n.id: n for n in s.scalars(select(Node).where(
            Node.id.in_(list(free)), Node.sku == offered.sku, Node.region == offered.region))
    } if free else {}
    fitting = [(free[n], n) for n in nodes if free[n] >= gpus]
    if not fitting:
        return None
    least = min(f for f, _ in fitting)
    node = nodes[random.choice([n for f, n in fitting if f == least])]
    # The host stays available while it hosts slices; the generation still orders claims.
    if not touch_read(s, node.id, node.generation, now):
        raise Raced()
    held = hold_gpus(s.connection(), [node.id], instance_id, now, gpus)
    return Claimed(node.id, node.name, node.status, node.stage, node.instance_id,
                   node.ip_address, node.bmc_driver, node.agent_kind, node.ssh_endpoint,
                   held[node.id])

