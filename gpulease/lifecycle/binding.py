"""The one writer of a node's binding to an instance, beside the one writer of its status.

A node is bound to at most one instance (`nodes.instance_id`) and holds GPUs for
instances (`gpu_allocations`, one active row per GPU: the whole node's for bare metal, a
slice's on a shared host). Its `generation` orders claims: a claim that starts from a read
re-checks the generation it read and bumps it, and whatever takes a node out of reach of
claims (a drain, set aside, retired, resumed, sent to repair, deleted, unbound) bumps it
too, so a claim that read the node before fails and is tried again with fresh data.

- `bind_update()`: the set-based bind of an order (the node lifecycle's `allocate`, the
  instance and a new generation in one UPDATE … RETURNING); `bind_read()`: a bind of a
  node read earlier (a replacement); `touch_read()`: a shared host's generation moved by a
  slice claim (the host stays available);
- `hold_gpus()`: allocations for a claim's GPUs, refused by the database's unique index if
  another claim took one in between;
- `unbind()`: a node lets go of its instance (erased, failed, given up), its GPUs and its
  address; `release_gpus()`: a container's slice given back;
- `fence()`: a claim that read the node before now fails; `unbound()`: a new node's;
- `erased()`: its disks were erased and certified since its last tenant (a bind marks the
  node `erase_due_since`; only this clears it, and a marked node cannot become available).

Nothing else writes these columns: tests/test_structure.py walks the package for writes of
`instance_id` and `generation` to a node and for allocations made or released elsewhere.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, bindparam, func, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable

from gpulease.db.repositories import NODE_BRIEF
from gpulease.db.tables import Event, Gpu, GpuAllocation, Node, UtcDateTime
from gpulease.domain.states import NODE
from gpulease.lifecycle.writer import bulk


class Raced(Exception):
    """What was read changed before the claim; retry the whole transaction."""


# The node lifecycle's `allocate` (available -> allocated), set-based: its guard in the
# WHERE, its values in the SET, its event rows beside the claim.
ALLOCATE = bulk(Node, NODE, "allocate")
# A node a claim may take: available, and no drain asked for.
CLAIMABLE: ColumnElement[bool] = and_(ALLOCATE.guard, Node.drain_requested_at.is_(None))


def bind_update(where: ColumnElement[bool]) -> Executable:
    """An UPDATE … RETURNING (what an instance's view shows of a node) that binds the free
    nodes `where` selects to the instance bound as `claim_instance`, at `claim_at`."""
    return (
        update(Node)
        .where(where, CLAIMABLE)
        .values(**ALLOCATE.values, instance_id=bindparam("claim_instance"),
                generation=Node.generation + 1,
                updated_at=bindparam("claim_at", type_=UtcDateTime()),
                erase_due_since=func.coalesce(Node.erase_due_since,
                                              bindparam("claim_at", type_=UtcDateTime())))
        .returning(*NODE_BRIEF)
    )


def _claim_read(s: Session, node_id: str, generation: int, values: dict[str, object]) -> bool:
    """Update a node read earlier, only if nobody changed it since (its generation) and it
    is still claimable; False means retry with fresh data."""
    result = s.execute(
        update(Node)
        .where(Node.id == node_id, Node.generation == generation, CLAIMABLE)
        .values(generation=generation + 1, **values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined,no-any-return]


def bind_read(s: Session, node_id: str, generation: int, now: datetime, *, actor: str,
              instance_id: str) -> bool:
    """Bind a node read earlier to an instance (available -> allocated, recorded), in the
    caller's transaction; False when it changed since the read."""
    if not _claim_read(s, node_id, generation, {
            **ALLOCATE.values, "instance_id": instance_id, "updated_at": now,
            "erase_due_since": func.coalesce(Node.erase_due_since, now)}):
        return False
    s.execute(insert(Event), ALLOCATE.events([node_id], now, actor, instance_id))
    return True


def touch_read(s: Session, node_id: str, generation: int, now: datetime) -> bool:
    """A slice claim on a shared host read earlier: the host stays available (it hosts
    slices), its generation still orders the claims; False when it changed since."""
    return _claim_read(s, node_id, generation, {"updated_at": now})


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


def hold_gpus(conn: Connection, node_ids: list[str], instance_id: str, now: datetime,
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


def release_gpus(s: Session, node_id: str, now: datetime, instance_id: str | None = None
                 ) -> None:
    """The node's active allocations end now (only `instance_id`'s: a container's slice)."""
    q = update(GpuAllocation).where(GpuAllocation.node_id == node_id,
                                    GpuAllocation.released_at.is_(None))
    if instance_id:
        q = q.where(GpuAllocation.instance_id == instance_id)
    s.execute(q.values(released_at=now).execution_options(synchronize_session=False))


def unbound() -> dict[str, object]:
    """A new node's binding: no instance, the first generation (with `initial()`)."""
    return {"instance_id": None, "generation": 0}


def erased(node: Node) -> None:
    """A clean's erase passed, every disk certified: the node may go back to the pool."""
    node.erase_due_since = None


def fence(node: Node) -> None:
    """A claim that read the node before now fails (it re-checks the generation)."""
    node.generation += 1


def unbind(s: Session, node: Node, now: datetime) -> str | None:
    """The node lets go of its instance: its GPUs released, its instance and address
    cleared, claims fenced. Returns the instance it was bound to (to be woken)."""
    instance_id = node.instance_id
    release_gpus(s, node.id, now)
    node.instance_id = None
    node.ip_address = None
    fence(node)
    return instance_id
