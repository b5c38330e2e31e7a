"""Tenant-scoped queries. Every read of a tenant's resource goes through here, so another
tenant's instance is simply not found (404), never forbidden (which would confirm it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Gpu, GpuAllocation, Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import NotFound


def scoped_to_tenant(actor: Principal) -> bool:
    """Whether the actor sees its own tenant's instances only (everyone but operators)."""
    return not actor.is_operator


def instances_query(actor: Principal) -> Select[Instance]:
    q = select(Instance)
    if scoped_to_tenant(actor):
        q = q.where(Instance.tenant_id == actor.tenant_id)
    return q


def get_instance(s: Session, actor: Principal, instance_id: str, *, lock: bool = False) -> Instance:
    q = instances_query(actor).where(Instance.id == instance_id)
    if lock:
        q = q.with_for_update()
    inst = s.scalar(q)
    if inst is None:
        raise NotFound(
            "No instance {instance_id} in your account; `gpulease instances` lists yours.",
            instance_id=instance_id)
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
        _held(out, node.id, node, index, bool(active))
    return list(out.values())


N = TypeVar("N")


def _held(out: dict[str, tuple[N, list[int], bool]], node_id: str, node: N, index: int,
          active: bool) -> None:
    """One allocation row into `out` (node id -> the node, its GPU indices, held now): a
    node an instance held twice (a swap brought it back) is listed once, as held now, with
    its GPUs once."""
    seen = out.get(node_id)
    if seen is None or (active and not seen[2]):  # held now outweighs held before
        seen = out[node_id] = (node, [], active)
    if active == seen[2] and index not in seen[1]:
        seen[1].append(index)


class NodeBrief(NamedTuple):
    """What an instance's view shows of a node (read as columns, not as a whole row)."""

    id: str
    name: str
    status: str
    stage: str | None
    instance_id: str | None
    ip_address: str | None
    bmc_driver: str
    agent_kind: str
    ssh_endpoint: str | None


NODE_BRIEF = (Node.id, Node.name, Node.status, Node.stage, Node.instance_id,
              Node.ip_address, Node.bmc_driver, Node.agent_kind, Node.ssh_endpoint)


# built once: a page's statement, its instance ids bound at each call
_ALLOCATIONS_OF = (
    select(GpuAllocation.instance_id, Gpu.index, GpuAllocation.released_at.is_(None),
           *NODE_BRIEF)
    .join(Node, GpuAllocation.node_id == Node.id)
    .join(Gpu, Gpu.id == GpuAllocation.gpu_id)
    .where(GpuAllocation.instance_id.in_(bindparam("ids", expanding=True)))
    .order_by(GpuAllocation.instance_id, Node.name, Gpu.index))


def allocations_of(s: Session, instance_ids: Sequence[str]
                   ) -> dict[str, list[tuple[NodeBrief, list[int], bool]]]:
    """Every node each instance of a page held (now or before), its GPU indices, and
    whether held now: instance_allocations for the whole page, in one statement."""
    found: dict[str, dict[str, tuple[NodeBrief, list[int], bool]]] = {}
    if not instance_ids:
        return {}
    rows = s.execute(_ALLOCATIONS_OF, {"ids": list(instance_ids)})
    for instance_id, index, active, *node in rows:
        brief = NodeBrief(*node)
        _held(found.setdefault(instance_id, {}), brief.id, brief, index, bool(active))
    return {i: list(found.get(i, {}).values()) for i in instance_ids}


def events_of(s: Session, instance_ids: Sequence[str]) -> dict[str, list[Event]]:
    """instance_events for a page of instances, in one statement."""
    out: dict[str, list[Event]] = {i: [] for i in instance_ids}
    if instance_ids:
        for e in s.scalars(select(Event).where(Event.instance_id.in_(instance_ids))
                           .order_by(Event.at, Event.id)):
            out[str(e.instance_id)].append(e)
    return out


_EVENTS_OF_ONE = (select(Event).where(Event.instance_id == bindparam("id"))
                  .order_by(Event.at, Event.id))  # built once


def instance_events(s: Session, instance_id: str) -> list[Event]:
    return list(s.scalars(_EVENTS_OF_ONE, {"id": instance_id}))


def bound_nodes(s: Session, instance_id: str, *, lock: bool = False) -> list[Node]:
    q = select(Node).where(Node.instance_id == instance_id).order_by(Node.name)
    if lock:
        q = q.with_for_update()
    return list(s.scalars(q))


def lock_node(s: Session, node_id: str) -> Node | None:
    """The node, locked in the platform's one order: the instance it serves first, then the
    node (docs/architecture.md, "Lock order"). A writer that locked the node alone and then
    wrote its instance's events or tickets (a foreign key share-locks the instance) would
    deadlock against a step that holds the instance and waits for the node. The binding
    read before the locks is read again under them; a node rebound in between is locked
    again in the new order."""
    for _ in range(3):
        instance_id = s.scalar(select(Node.instance_id).where(Node.id == node_id))
        if instance_id is not None:
            s.execute(select(Instance.id).where(Instance.id == instance_id).with_for_update())
        node = s.get(Node, node_id, with_for_update=True, populate_existing=True)
        if node is None or node.instance_id == instance_id or node.instance_id is None:
            return node
    return node


def share_instance_first(s: Session, instance_id: str | None) -> None:
    """Before inserting a row that names both a node and its instance (a config drive, a
    ramdisk boot): the instance's key-share lock, which the foreign key would take anyway,
    taken before the node's. Taken in the other order it deadlocks against a step that
    holds the instance and waits to lock the node."""
    if instance_id:
        s.execute(select(Instance.id).where(Instance.id == instance_id)
                  .with_for_update(key_share=True))
