"""Fleet inventory: fabrics, racks, nodes and their GPUs; operator actions on nodes."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Fabric, Gpu, GpuAllocation, Node, NodeAgent, Rack
from gpulease.db.upsert import insert_unless_present
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.fleet.enrollment import bmc_key
from gpulease.domain.phrases import phrase
from gpulease.domain.states import NODE, NODE_BUSY, NODE_STAGE, NodeStatus
from gpulease.lifecycle.binding import fence, unbound
from gpulease.lifecycle.history import by
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Driven, Moves, Records
from gpulease.schemas import FleetCount, NodeEventView, NodeView, Page
from gpulease.schemas.fleet import NodeFilter
from gpulease.security import new_id
from gpulease.services.agents.node_agent import is_simulated


@dataclass(frozen=True)
class NodeSpec:
    name: str
    sku: str
    region: str
    pool: str = "bare_metal"
    serial: str = ""
    rack_id: str | None = None
    fabric_id: str | None = None
    bmc_driver: str = "simulated"
    bmc_address: str = ""
    bmc_username: str = "admin"
    bmc_password: str = ""
    status: NodeStatus = NodeStatus.AVAILABLE
    status_reason: str | None = None
    inventory_json: str | None = None
    agent_kind: str = "builtin"  # builtin (simulated stand-in) | gpulease (the real agent)
    runtime_url: str | None = None  # a shared server's Docker engine
    boot_address: str | None = None  # network boot: its boot NIC's address (DHCP)
    ssh_endpoint: str | None = None  # HOST:PORT of its SSH behind NAT or a port forward
    system_uuid: str | None = None  # what its BMC says the system's UUID is


def ensure_fabric(s: Session, fabric_id: str, region: str, kind: str = "infiniband",
                  rate_gbps: int = 400) -> None:
    """Create the fabric unless it exists; safe when two enrollments name it at once."""
    insert_unless_present(s, Fabric, "id", id=fabric_id, region=region, kind=kind,
                          rate_gbps=rate_gbps)


def ensure_rack(s: Session, rack_id: str, region: str, zone: str, fabric_id: str | None,
                leaf_switch: str | None) -> Rack:
    rack = s.get(Rack, rack_id)
    if rack is None:
        rack = Rack(id=rack_id, region=region, zone=zone, fabric_id=fabric_id,
                    leaf_switch=leaf_switch)
        s.add(rack)
    return rack


def add_node(s: Session, p: Driven, spec: NodeSpec) -> Node:
    sku = p.catalog.sku_by_id.get(spec.sku)
    if sku is None:
        raise InvalidInput("sku", "Unknown SKU {spec_sku!r}.", sorted(p.catalog.sku_by_id),
                           spec_sku=spec.sku)
    now = p.clock.now()
    node = Node(
        id=new_id("node"), name=spec.name, sku=spec.sku, region=spec.region, pool=spec.pool,
        serial=spec.serial, rack_id=spec.rack_id,
        fabric_id=spec.fabric_id, bmc_driver=spec.bmc_driver,
        bmc_address=spec.bmc_address or f"simulated://{spec.name}",
        bmc_key=bmc_key(spec.bmc_address) if spec.bmc_address else None,
        system_uuid=spec.system_uuid,
        bmc_username=spec.bmc_username, bmc_password_enc=p.box.seal(spec.bmc_password),
        **initial(Node, NODE, spec.status, spec.status_reason),
        inventory_json=spec.inventory_json, agent_kind=spec.agent_kind,
        runtime_url=spec.runtime_url, boot_address=spec.boot_address,
        ssh_endpoint=spec.ssh_endpoint, **unbound(),
        attempts=0, created_at=now, updated_at=now,
    )
    s.add(node)
    s.flush()  # the GPUs reference the node
    gpu_model = p.catalog.gpu_by_id[sku.gpu].name
    for index in range(sku.gpu_count):
        s.add(Gpu(id=new_id("gpu"), node_id=node.id, index=index, model=gpu_model,
                  uuid=f"GPU-{uuid.uuid4()}"))
    return node


def _free_gpu_counts(s: Session, node_ids: list[str]) -> dict[str, tuple[int, int]]:
    """(GPUs, free GPUs) per node."""
    if not node_ids:
        return {}
    total: dict[str, int] = {
        n: c for n, c in s.execute(select(Gpu.node_id, func.count())
                                   .where(Gpu.node_id.in_(node_ids)).group_by(Gpu.node_id))
    }
    used: dict[str, int] = {
        n: c for n, c in s.execute(select(GpuAllocation.node_id, func.count())
                                   .where(GpuAllocation.node_id.in_(node_ids),
                                          GpuAllocation.released_at.is_(None))
                                   .group_by(GpuAllocation.node_id))
    }
    return {n: (total.get(n, 0), total.get(n, 0) - used.get(n, 0)) for n in node_ids}


def node_view(node: Node, rack: Rack | None, counts: tuple[int, int],
              simulated: bool) -> NodeView:
    return NodeView(
        id=node.id, name=node.name, sku=node.sku, region=node.region, pool=node.pool,
        serial=node.serial, status=node.status, status_reason=node.status_reason,
        stage=node.stage, rack=node.rack_id, fabric=node.fabric_id,
        leaf_switch=rack.leaf_switch if rack else None, bmc_driver=node.bmc_driver,
        bmc_address=node.bmc_address, instance_id=node.instance_id, gpu_count=counts[0],
        free_gpus=counts[1], drain_requested=node.drain_requested_at is not None,
        simulated=simulated, agent=node.agent_kind, runtime=node.runtime_url,
        boot_address=node.boot_address, ssh_endpoint=node.ssh_endpoint,
        erase_due_since=node.erase_due_since, last_error=node.last_error,
        updated_at=node.updated_at,
        inventory=json.loads(node.inventory_json) if node.inventory_json else None,
    )


def list_nodes(p: Driven, actor: Principal, where: NodeFilter = NodeFilter(),
               limit: int = 100, offset: int = 0) -> Page[NodeView]:
    actor.require_operator()
    status, region, sku, fabric, rack = (where.status, where.region, where.sku, where.fabric,
                                         where.rack)
    if status is not None and status not in {s.value for s in NodeStatus}:
        raise InvalidInput("status", "Unknown node status {status!r}.",
                           [s.value for s in NodeStatus], status=status)
    with p.db.read() as s:
        q = select(Node)
        if status:
            q = q.where(Node.status == status)
        else:  # deleted nodes only when asked for
            q = q.where(Node.status != NodeStatus.DELETED.value)
        if region:
            q = q.where(Node.region == region)
        if sku:
            q = q.where(Node.sku == sku)
        if fabric:
            q = q.where(Node.fabric_id == fabric)
        if rack:
            q = q.where(Node.rack_id == rack)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        nodes = list(s.scalars(q.order_by(Node.name).limit(limit).offset(offset)))
        counts = _free_gpu_counts(s, [n.id for n in nodes])
        racks = {r.id: r for r in s.scalars(select(Rack))}
        items = [node_view(n, racks.get(n.rack_id or ""), counts[n.id],
                           is_simulated(p, n.bmc_driver, n.agent_kind)) for n in nodes]
    return Page(items=items, total=total, limit=limit, offset=offset)


def load_node(s: Session, node_id: str, lock: bool = True) -> Node:
    """The node by id or name (deleted nodes by id only), locked for a change."""
    q = select(Node).where((Node.id == node_id) | (Node.name == node_id))
    node = s.scalar(q.with_for_update() if lock else q)
    if node is None:
        raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
    return node


def get_node(p: Driven, actor: Principal, node_id: str) -> NodeView:
    actor.require_operator()
    with p.db.read() as s:
        node = load_node(s, node_id)
        rack = s.get(Rack, node.rack_id) if node.rack_id else None
        view = node_view(node, rack, _free_gpu_counts(s, [node.id])[node.id],
                         is_simulated(p, node.bmc_driver, node.agent_kind))
        agent = s.get(NodeAgent, node.id)
        if agent is not None:  # what the node's agent last reported about the server
            view.agent_report = {
                "hostname": agent.hostname, "address": agent.address,
                "simulated": agent.simulated, "registered_at": agent.registered_at,
                "last_seen_at": agent.last_seen_at,
                "inventory": json.loads(agent.inventory_json) if agent.inventory_json else None}
        return view


def drain_node(p: Driven, actor: Principal, node_id: str, reason: str | None) -> NodeView:
    """No new allocations; a free node goes to maintenance now, a busy one once freed."""
    actor.require_operator()
    with p.db.write() as s:
        node = load_node(s, node_id)
        now = p.clock.now()
        node.drain_requested_at = now
        fence(node)  # a claim that read it before now fails
        has_slices = bool(s.scalar(select(func.count()).where(
            GpuAllocation.node_id == node.id, GpuAllocation.released_at.is_(None))))
        if node.status == NodeStatus.AVAILABLE.value and not has_slices:
            transition(s, p, node, NODE, "drain", Move(now, actor=by(actor),
                       reason=reason or phrase("drained by operator")))
        elif NODE.allows(NodeStatus(node.status), "request_drain"):
            transition(s, p, node, NODE, "request_drain", Move(now, actor=by(actor),
                       reason=reason or phrase("drain requested: maintenance once freed")))
    return get_node(p, actor, node_id)


def maintenance_node(p: Driven, actor: Principal, node_id: str, reason: str | None) -> NodeView:
    actor.require_operator()
    with p.db.write() as s:
        node = load_node(s, node_id)
        busy = node.status in NODE_BUSY or node.instance_id is not None or bool(
            s.scalar(select(func.count()).where(GpuAllocation.node_id == node.id,
                                                GpuAllocation.released_at.is_(None))))
        if busy:
            raise Conflict(
                "Node {node_name} holds instance {value}; "
                "use `gpulease node drain` to take it out once the tenant releases it.",
                node_name=node.name, value=node.instance_id or '(container slices)')
        if node.status == NodeStatus.CLEANING.value:
            raise Conflict("Node {node_name} is being cleaned; drain it instead.",
                           node_name=node.name)
        fence(node)
        transition(s, p, node, NODE, "set_aside", Move(p.clock.now(), actor=by(actor),
                   reason=reason or phrase("maintenance by operator")))
    return get_node(p, actor, node_id)


def retire_node(p: Driven, actor: Principal, node_id: str, reason: str | None) -> NodeView:
    """Declare a node in maintenance broken beyond repair: it never returns to the pool on
    its own (an operator may still resume it), and its history stays."""
    actor.require_operator()
    if not (reason or "").strip():
        raise InvalidInput("reason", "Say why the node is retired (kept with its record).")
    with p.db.write() as s:
        node = load_node(s, node_id)
        if not NODE.allows(NodeStatus(node.status), "retire"):
            raise Conflict("Node {node_name} is {node_status}; set it aside (`gpulease node "
                           "maintenance`, or drain it) before retiring it.",
                           node_name=node.name, node_status=node.status)
        fence(node)
        transition(s, p, node, NODE, "retire", Move(p.clock.now(), actor=by(actor), reason=reason))
    return get_node(p, actor, node_id)


def erase_before_pool(s: Session, p: Moves, node: Node, now: datetime, actor: str) -> None:
    """A node put back that held a tenant's data with no certified erase since: it is
    cleaned (its disks erased from the ramdisk, certified), then it joins the pool."""
    transition(s, p, node, NODE, "erase", Move(now, actor=actor, reason=phrase(
        "held a tenant's data with no certified erase since: erasing before it returns to "
        "the pool")))
    transition(s, p, node, NODE_STAGE, "clean", Move(now, actor=actor,
                                                     timeout_s=p.settings.stage_timeout_s))
    node.next_attempt_at = now


def resume_node(p: Driven, actor: Principal, node_id: str) -> NodeView:
    actor.require_operator()
    with p.db.write() as s:
        node = load_node(s, node_id)
        now = p.clock.now()
        drained, node.drain_requested_at = node.drain_requested_at, None
        status = NodeStatus(node.status)
        if NODE.allows(status, "resume"):
            if node.instance_id is not None:
                raise Conflict("Node {node_name} is still tied to instance {instance}.",
                               node_name=node.name, instance=node.instance_id)
            fence(node)
            node.last_error = None
            if node.erase_due_since is not None:  # a tenant's data may be on it: erase first
                erase_before_pool(s, p, node, now, by(actor))
            else:
                transition(s, p, node, NODE, "resume", Move(now, actor=by(actor)))
        elif drained is not None and NODE.allows(status, "cancel_drain"):
            transition(s, p, node, NODE, "cancel_drain", Move(now, actor=by(actor)))
    p.wake()
    return get_node(p, actor, node_id)


def node_history(p: Records, actor: Principal, node_id: str, limit: int = 100,
                 offset: int = 0) -> Page[NodeEventView]:
    """A node's history, newest first: every transition, error, result and note, with who
    caused it (the worker, a sweep, an operator, the BMC)."""
    actor.require_operator()
    with p.db.read() as s:
        node = s.scalar(select(Node).where((Node.id == node_id) | (Node.name == node_id)))
        if node is None:
            raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
        where = (Event.resource == "node", Event.resource_id == node.id)
        total = s.scalar(select(func.count()).select_from(Event).where(*where)) or 0
        rows = s.scalars(select(Event).where(*where).order_by(Event.at.desc(), Event.id.desc())
                         .limit(limit).offset(offset))
        items = [NodeEventView(at=e.at, kind=e.kind, from_value=e.from_value,
                               to_value=e.to_value, message=e.message, actor=e.actor,
                               instance_id=e.instance_id, phrase=e.phrase) for e in rows]
    return Page(items=items, total=total, limit=limit, offset=offset)


def fleet_counts(p: Records, actor: Principal) -> list[FleetCount]:
    """Nodes per region, rack, fabric and status (one statement)."""
    actor.require_operator()
    with p.db.read() as s:
        rows = s.execute(select(Node.region, Node.rack_id, Node.fabric_id, Node.status,
                                func.count())
                         .where(Node.status != NodeStatus.DELETED.value)
                         .group_by(Node.region, Node.rack_id, Node.fabric_id, Node.status)
                         .order_by(Node.region, Node.rack_id, Node.fabric_id, Node.status))
        return [FleetCount(region=r, rack=k, fabric=f, status=st, nodes=n)
                for r, k, f, st, n in rows]
