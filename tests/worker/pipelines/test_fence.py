"""Fenced hands: a worker frozen inside a hardware step past its lock is taken over; when
it wakes, its call does not reach the BMC (the simulated BMC counts every request), and its
late result writes nothing; nor does a container's start or stop on a shared server's
engine. The freeze is played in-process: worker A's read of the power
state blocks until worker B has taken the node over and done the step; or, against the
sushy-tools emulator, A stops after the fence's check, inside the driver, and the request
it would have sent when it woke is not sent. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time

import pytest

from gpulease.db.claims import Claim, take
from gpulease.db.tables import Instance, Node
from gpulease.drivers.redfish import RedfishBmc
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.simulated import SimulatedBmc
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, PowerState
from gpulease.schemas import OrderRequest
from gpulease.services.agents.node_agent import node_ref
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.bmc_witness import RecordingProxy, claim_still_held
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import CONTAINER_OFFER, node_by_name, node_name_of, place, sim
from gpulease.worker.pipelines import containers
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines import nodes as node_pipeline
from gpulease.worker.pipelines.base import claim_due, drive
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_bmc
from tests.fixtures.redfish import PASSWORD, USER


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


def test_a_worker_frozen_between_its_check_and_its_request_does_not_send_it(
        fleet: Platform, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The freeze lands inside the driver, after the fence's check: between the read of the
    system and the reset it posts. Through a witness in front of the sushy-tools emulator,
    which judges each change by the claim it names as it arrives."""
    witness = RecordingProxy(int(emulator.url.rsplit(":", 1)[1]),
                             judge=claim_still_held(fleet.db))
    address = emulator.system_url(0).replace(emulator.url, f"http://127.0.0.1:{witness.port}")
    with fleet.db.write() as s:
        inventory.ensure_fabric(s, "ib-ningxia-1-fence", "ningxia-1")
        s.flush()
        add_node(s, fleet, NodeSpec(name="rf-fence-00", sku="h100-80g-x8", region="ningxia-1",
                                    fabric_id="ib-ningxia-1-fence", bmc_driver="redfish",
                                    bmc_address=address, bmc_username=USER,
                                    bmc_password=PASSWORD))
    fleet.settings.lock_ttl_s = 600.0  # the check's quarter lasts 150 s: only the freeze
    # below ends it
    (held,) = claim_due(fleet, Node, "a", extra=[Node.name == "rf-fence-00"], due=False)
    fence = Fence(fleet, held)
    endpoint = BmcEndpoint("rf-fence-00", address, USER, PASSWORD)
    bmc = fenced_bmc(fleet.drivers.bmc_for("redfish", endpoint), fence)
    try:
        bmc.power_on()  # held: the reset goes out and names its claim
        (sent,) = [c for c in witness.changes if c[1].endswith("ComputerSystem.Reset")]
        assert sent[2] == fence.label and witness.late == []

        real_system = RedfishBmc._system

        def frozen_after_the_read(self: RedfishBmc) -> object:
            system = real_system(self)
            with fleet.db.write() as s:  # asleep past its lock: B took the node over
                row = s.get(Node, held.id)
                assert row is not None
                take(row)
            fence.fresh_until = time.monotonic() - 1  # the check's quarter went by
            return system

        monkeypatch.setattr(RedfishBmc, "_system", frozen_after_the_read)
        try:
            bmc.force_restart()
        except Fenced as exc:
            assert "no longer holds" in str(exc)
        else:
            raise AssertionError("a request went out under a lost claim")
        assert len([c for c in witness.changes if c[1].endswith("ComputerSystem.Reset")]) == 1
        assert witness.late == []  # nothing reached the BMC under the lost claim
    finally:
        witness.stop()
