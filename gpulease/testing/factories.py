"""Rented machines and their nodes, made the way tenants and the worker make them: an
order placed, an instance delivered (bare metal, a cluster member or a container), the
nodes it holds; counts that say whether anything is held twice; the notices a tenant was
sent; a minute of simulated GPU telemetry with the faults asked for."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.configdrive import read_iso
from gpulease.db.money_tables import LeaseNotice
from gpulease.db.tables import (
    ConfigDrive,
    Event,
    GpuAllocation,
    IdempotencyKey,
    Instance,
    Node,
)
from gpulease.demo_agents import DemoAgents
from gpulease.domain.states import InstanceStatus
from gpulease.drivers.simulated import SimulatedFleet
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import node_changes
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.services.support import tickets
from gpulease.testing.callers import TenantCtx
from gpulease.worker.runner import Worker

H100 = {"sku": "h100-80g-x8", "region": "ningxia-1"}
CONTAINER_OFFER = "rtx4090-24g-container"


def sim(p: Platform) -> SimulatedFleet:
    """The simulated servers of a platform with simulated hardware (faults go in here)."""
    if p.drivers.fleet is None:
        raise LookupError("this platform has no simulated hardware (GPULEASE_SIMULATED_HARDWARE)")
    return p.drivers.fleet


def place(p: Platform, t: TenantCtx, key: str, **kw: Any) -> str:
    """An H100 server (or what `kw` asks for) ordered by `t`; its instance id."""
    view, _ = orders.place_order(p, t.principal, OrderRequest(ssh_keys=[key], **{**H100, **kw}))
    return view.id


def node_name_of(p: Platform, t: TenantCtx, iid: str) -> str:
    return instances.show_instance(p, t.principal, iid).nodes[0].name


def _delivered(p: Platform, t: TenantCtx, worker: Worker, iid: str) -> str:
    worker.run_until_idle()
    status = instances.show_instance(p, t.principal, iid).status
    if status != InstanceStatus.READY:
        raise AssertionError(f"{iid} is {status}, not delivered")
    return iid


def deliver(p: Platform, t: TenantCtx, worker: Worker, key: str, term: str = "month",
            **kw: str) -> str:
    """An H100 server leased for `term` and delivered by `worker`: its instance id."""
    return _delivered(p, t, worker, place(p, t, key, term=term, **kw))


def container(p: Platform, t: TenantCtx, worker: Worker, key: str, gpus: int = 2) -> str:
    """A container instance of `gpus` RTX 4090s, started by `worker`: its instance id."""
    iid = orders.place_order(p, t.principal, OrderRequest(
        kind="container", offer=CONTAINER_OFFER, gpus=gpus, ssh_keys=[key]))[0].id
    return _delivered(p, t, worker, iid)


def delivered_with_agent(p: Platform, t: TenantCtx, key: str) -> tuple[str, Node, str]:
    """An H100 server delivered, its node, and its stand-in agent's credential (enrolled
    as the demo's agents are): what a telemetry push needs."""
    iid = deliver(p, t, Worker(p), key)
    node = node_by_name(p, node_name_of(p, t, iid))
    return iid, node, DemoAgents(p)._credential(node)


def node_by_name(p: Platform, name: str) -> Node:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
    if node is None:
        raise LookupError(f"no node {name}")
    return node


def nodes_of(p: Platform, sku: str, region: str) -> list[Node]:
    with p.db.read() as s:
        return list(s.scalars(select(Node).where(Node.sku == sku, Node.region == region,
                                                 Node.pool == "bare_metal").order_by(Node.name)))


def counts(p: Platform) -> dict[str, int]:
    """Row counts of everything an order writes."""
    with p.db.read() as s:
        return {
            t.__tablename__: s.scalar(select(func.count()).select_from(t)) or 0
            for t in (Instance, GpuAllocation, Event, IdempotencyKey)
        } | {"allocated_nodes": s.scalar(
            select(func.count()).select_from(Node).where(Node.instance_id.is_not(None))) or 0}


def double_allocated_gpus(p: Platform) -> list[str]:
    """GPUs held by two instances at once (there must be none)."""
    with p.db.read() as s:
        return list(s.scalars(
            select(GpuAllocation.gpu_id).where(GpuAllocation.released_at.is_(None))
            .group_by(GpuAllocation.gpu_id).having(func.count() > 1)))


def drive_token(p: Platform, node_name: str) -> str | None:
    """The one-time agent token on the node's current config drive (what the agent of a
    freshly booted OS, or of the cleaning ramdisk, enrolls with)."""
    with p.db.read() as s:
        iso = s.scalar(select(ConfigDrive.iso).join(Node, Node.id == ConfigDrive.node_id)
                       .where(Node.name == node_name).order_by(ConfigDrive.created_at.desc())
                       .limit(1))
    if iso is None:
        return None
    found = re.search(r"GPULEASE_AGENT_TOKEN=(glat_[A-Za-z0-9_-]+)", read_iso(iso)["user-data"])
    return found.group(1) if found else None


def window(*faults: str) -> list[dict[str, object]]:
    """A minute of eight simulated GPUs under full load with `faults` (the agent's
    summaries, as one push carries them)."""
    gpus = SimulatedGpus(8, faults=parse_faults(faults), clock=VirtualClock())
    gpus.load = 1.0
    sampler = Sampler(gpus)
    for _ in range(60):
        sampler.sweep()
        gpus.clock.advance(1.0)  # type: ignore[attr-defined]
    return [g.as_dict() for g in sampler.summaries()]


def notices(p: Platform, to: str) -> list[str]:
    """The kinds of the notices sent to `to` (a tenant, or the operators), oldest first."""
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(LeaseNotice.tenant_id == to)
                              .order_by(LeaseNotice.id)))


def occupy_spare(p: Platform, t: TenantCtx, key: str) -> None:
    """The H100 offer's other node ordered too: a failed one has no spare to move to."""
    place(p, t, key)


def faulty_rental(p: Platform, tenant: TenantCtx, operator: TenantCtx, key: str,
                  worker: Worker) -> tuple[str, str, str]:
    """A delivered H100 whose GPU 3 fell off the bus: (instance, node, ticket)."""
    iid = deliver(p, tenant, worker, key)
    node = instances.show_instance(p, tenant.principal, iid).nodes[0].name
    node_changes.inject_faults(p, operator.principal, node, ["xid79:3"])
    DemoAgents(p).tick()
    (ticket,) = tickets.list_tickets(p, operator.principal, tickets.OPEN).items
    return iid, node, ticket.id


def instance_notices(p: Platform, iid: str) -> list[str]:
    """The kinds of the notices about one instance (its lease's reminders), oldest first."""
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(LeaseNotice.instance_id == iid)
                              .order_by(LeaseNotice.id)))


def at_once(calls: int, call: Callable[[], object], refused: type[Exception]) -> list[str]:
    """`call` from `calls` threads released together: "done" or "refused" for each (the
    races of quotas and budgets: how many got through)."""
    start = threading.Barrier(calls)
    outcomes: list[str] = []

    def one() -> None:
        start.wait()
        try:
            call()
            outcomes.append("done")
        except refused:
            outcomes.append("refused")

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(outcomes)
