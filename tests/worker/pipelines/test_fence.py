"""Fenced hands: a worker frozen inside a hardware step past its lock is taken over; when
it wakes, its call does not reach the BMC (the simulated BMC counts every request), and its
late result writes nothing; nor does a container's start or stop on a shared server's
engine. The freeze is played in-process: worker A's read of the power
state blocks until worker B has taken the node over and done the step. SQLite and
PostgreSQL."""

from __future__ import annotations

import threading
import time

from gpulease.db.claims import Claim, take
from gpulease.db.tables import Instance, Node
from gpulease.drivers.simulated import SimulatedBmc
from gpulease.platform import Platform
from gpulease.ports.bmc import PowerState
from gpulease.schemas import OrderRequest
from gpulease.services.agents.node_agent import node_ref
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import CONTAINER_OFFER, node_by_name, node_name_of, place, sim
from gpulease.worker.pipelines import containers
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines import nodes as node_pipeline
from gpulease.worker.pipelines.base import claim_due, drive
from gpulease.worker.pipelines.fence import Fence, Fenced


def test_a_worker_frozen_past_its_lock_sends_nothing_when_it_wakes(
        fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: object) -> None:
    fleet.settings.lock_ttl_s = 1.0
    iid = place(fleet, tenant, key)
    drive(fleet, instance_pipeline.PIPELINE)  # its node starts deploying: power_off first
    name = node_name_of(fleet, tenant, iid)
    node = node_by_name(fleet, name)
    assert node.stage == "power_off"
    ref = node_ref(fleet, node)
    fleet.drivers.bmc_for(ref.bmc_driver, ref.endpoint).power_on()  # on: power_off asks
    assert sim(fleet).snapshot(name)["power"] == "on"

    frozen, woken = threading.Event(), threading.Event()
    real_read = SimulatedBmc.power_state

    def read(self: SimulatedBmc) -> PowerState:
        state = real_read(self)
        if threading.current_thread().name == "worker-a":
            frozen.set()
            woken.wait(30)  # frozen: SIGSTOPped, a paused VM, a stalled network
        return state

    monkeypatch.setattr(SimulatedBmc, "power_state", read)  # type: ignore[attr-defined]
    a = threading.Thread(target=drive, args=(fleet, node_pipeline.PIPELINE),
                         kwargs={"owner": "a", "limit": 1}, name="worker-a")
    a.start()
    assert frozen.wait(30)
    time.sleep(1.2)  # past A's lock: nobody extends it while A is frozen
    assert drive(fleet, node_pipeline.PIPELINE, owner="b", limit=1) == 1  # B takes over
    assert sim(fleet).snapshot(name)["requests"].get("power_off") == 1  # B's request
    moved = node_by_name(fleet, name)

    woken.set()  # A wakes, reads "on" and would power the server off again
    a.join(30)
    assert sim(fleet).snapshot(name)["requests"].get("power_off") == 1  # A sent nothing
    after = node_by_name(fleet, name)
    assert (after.stage, after.stage_requests) == (moved.stage, moved.stage_requests)


def test_the_fence_lets_a_live_claim_through_and_stops_a_lost_one(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    iid = place(fleet, tenant, key)
    drive(fleet, instance_pipeline.PIPELINE)
    name = node_name_of(fleet, tenant, iid)
    (held,) = claim_due(fleet, Node, "a", limit=1, extra=node_pipeline.PIPELINE.due(
        fleet.clock.now()), due=False)
    assert held.id == node_by_name(fleet, name).id
    fence = Fence(fleet, held)
    fence.check("power_off")  # held, with its lock to run: through
    with fleet.db.write() as s:
        row = s.get(Node, held.id)
        assert row is not None
        take(row)  # taken from it (a release, an operator)
    try:
        fence.check("power_off")
    except Fenced as exc:
        assert "no longer holds" in str(exc)
    else:
        raise AssertionError("a lost claim went through the fence")


def _claim_and_lose(fleet: Platform, table: type, pipeline: object) -> Claim:
    """The row claimed by worker A, then taken from it (A frozen past its lock, taken over)."""
    (held,) = claim_due(fleet, table, "a", limit=1,
                        extra=pipeline.due(fleet.clock.now()), due=False)  # type: ignore[attr-defined]
    with fleet.db.write() as s:
        row = s.get(table, held.id)
        assert row is not None
        take(row)
    return held


def test_a_container_is_neither_started_nor_stopped_by_a_worker_that_lost_its_claim(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="container", offer=CONTAINER_OFFER, gpus=1, ssh_keys=[key]))
    host = view.nodes[0].name
    with fleet.db.read() as s:
        inst = s.get(Instance, view.id)
        assert inst is not None
        spec = containers.container_spec(s, fleet, inst)
    held = _claim_and_lose(fleet, Instance, instance_pipeline.PIPELINE)
    containers.start_container(fleet, held, spec)
    assert view.id not in sim(fleet).snapshot(host).get("containers", {})  # nothing sent
    assert instances.show_instance(fleet, tenant.principal, view.id).status == "pending"

    drive(fleet, instance_pipeline.PIPELINE)  # the new holder starts it
    assert view.id in sim(fleet).snapshot(host)["containers"]
    actions.release_instance(fleet, tenant.principal, view.id)
    held = _claim_and_lose(fleet, Instance, instance_pipeline.PIPELINE)
    with fleet.db.read() as s:
        inst = s.get(Instance, view.id)
        assert inst is not None
        on_hosts = containers.held_hosts(s, inst)
    containers.stop_containers(fleet, held, on_hosts)
    assert view.id in sim(fleet).snapshot(host)["containers"]  # not stopped by the lost one
    assert instances.show_instance(fleet, tenant.principal, view.id).status == "releasing"
