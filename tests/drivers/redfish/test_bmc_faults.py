"""BMC faults injected by a TCP proxy in front of sushy-emulator: each fault ends where it
should, with the BMC's message, through the real engine on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gpulease.db.tables import Node
from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcTransientError, PowerState
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.drivers.redfish.proxy import FaultProxy
from tests.fixtures.redfish import PASSWORD, USER, start_emulator

pytestmark = pytest.mark.slow


@pytest.fixture
def proxy(emulator: Emulator) -> Iterator[FaultProxy]:
    fp = FaultProxy(urlsplit(emulator.url).port or 0)
    yield fp
    fp.close()


def via(proxy: FaultProxy, emu: Emulator, i: int = 0) -> str:
    return f"http://127.0.0.1:{proxy.port}/redfish/v1/Systems/{emu.systems[i]}"


def test_driver_classifies_each_fault(emulator: Emulator, proxy: FaultProxy) -> None:
    bmc = RedfishDriver(timeout_s=1).bmc(BmcEndpoint("n", via(proxy, emulator), USER,
                                                     PASSWORD))
    assert bmc.power_state() == PowerState.OFF
    proxy.set("500")
    with pytest.raises(BmcTransientError, match="500|answered"):
        bmc.power_state()
    proxy.set("drop")
    with pytest.raises(BmcTransientError, match="unreachable"):
        bmc.power_state()
    proxy.set("delay", delay_s=2.5)
    with pytest.raises(BmcTransientError):
        bmc.power_state()
    proxy.set("pass")
    assert bmc.power_state() == PowerState.OFF


def test_a_busy_bmc_is_asked_again_no_sooner_than_it_said(
        emulator: Emulator, proxy: FaultProxy) -> None:
    """A 503 with Retry-After: 5 is not retried at once (sushy's own quick retry is off):
    one request reaches the BMC, and the error carries the wait for the engine."""
    bmc = RedfishDriver(timeout_s=2).bmc(BmcEndpoint("n", via(proxy, emulator), USER,
                                                     PASSWORD))
    assert bmc.power_state() == PowerState.OFF
    proxy.set("503")
    seen = proxy.seen
    with pytest.raises(BmcTransientError, match="503") as busy:
        bmc.power_state()
    assert busy.value.retry_after_s == 5.0 and proxy.seen == seen + 1
    proxy.set("drop")  # no answer at all: the earlier 503's wait says nothing of it
    with pytest.raises(BmcTransientError, match="unreachable") as dropped:
        bmc.power_state()
    assert dropped.value.retry_after_s is None
    proxy.set("500")
    with pytest.raises(BmcTransientError) as failed:  # no Retry-After: the engine's backoff
        bmc.power_state()
    assert failed.value.retry_after_s is None
    proxy.set("pass")


def test_a_deploy_step_a_bmc_answers_busy_waits_what_it_asked(
    faulty: Platform, proxy: FaultProxy, tenant: TenantCtx, key: str
) -> None:
    from datetime import timedelta

    from gpulease.worker.pipelines import instances as instance_pipeline
    from gpulease.worker.pipelines import nodes as node_pipeline
    from gpulease.worker.pipelines.base import drive

    faulty.settings.backoff_base_s = faulty.settings.backoff_max_s = 0.1
    iid = order(faulty, tenant, key)
    drive(faulty, instance_pipeline.PIPELINE)
    proxy.set("503")
    before = faulty.clock.now()
    drive(faulty, node_pipeline.PIPELINE, limit=1)
    proxy.set("pass")
    (name,) = [n.name for n in instances.show_instance(faulty, tenant.principal, iid).nodes]
    with faulty.db.read() as s:
        from sqlalchemy import select
        node = s.scalar(select(Node).where(Node.name == name))
    assert node is not None and node.attempts == 1 and "503" in (node.last_error or "")
    assert node.next_attempt_at is not None
    assert node.next_attempt_at >= before + timedelta(seconds=5)  # not the 0.1 s backoff


def enroll_via_proxy(p: Platform, proxy: FaultProxy, emu: Emulator) -> None:
    """The emulator's BMCs behind the fault proxy. Their logs were read a moment ago and
    they push nothing, so the worker's BMC-log sweep leaves them alone for its interval:
    every fault the proxy injects lands on the deploy these tests watch."""
    with p.db.write() as s:
        inventory.ensure_fabric(s, "ib-ningxia-1-1", "ningxia-1")
        s.flush()
        for i in range(len(emu.systems)):
            node = add_node(s, p, NodeSpec(
                name=f"rf-{i}", sku="h100-80g-x8", region="ningxia-1",
                fabric_id="ib-ningxia-1-1", bmc_driver="redfish",
                bmc_address=via(proxy, emu, i), bmc_username=USER, bmc_password=PASSWORD))
            node.bmc_checked_at, node.bmc_subscription = p.clock.now(), ""


def impatient(platform: Platform, image_server: str, server: LiveServer) -> Platform:
    """Fast polls, quick backoff, 3 attempts and a 1 s BMC timeout: faults end quickly."""
    platform.settings.public_url = server.url
    platform.settings.media_base_url = image_server
    platform.settings.poll_interval_s = 0.2
    platform.settings.backoff_base_s = 0.05
    platform.settings.max_attempts = 3
    platform.drivers.bmc["redfish"] = RedfishDriver(timeout_s=1).bmc
    platform.drivers.agent_for("redfish")._bmc_for = platform.drivers.bmc["redfish"]  # type: ignore[attr-defined]
    return platform


@pytest.fixture
def faulty(platform: Platform, emulator: Emulator, proxy: FaultProxy,
           image_server: str, server: LiveServer) -> Platform:
    enroll_via_proxy(impatient(platform, image_server, server), proxy, emulator)
    return platform


def order(p: Platform, t: TenantCtx, key: str) -> str:
    return orders.place_order(p, t.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id


def test_a_few_500s_are_retried_and_the_deploy_completes(
    faulty: Platform, proxy: FaultProxy, tenant: TenantCtx, key: str
) -> None:
    iid = order(faulty, tenant, key)
    proxy.set("500", times=2)
    Worker(faulty).run_until_idle(timeout_s=90)
    view = instances.show_instance(faulty, tenant.principal, iid)
    assert view.status == "ready", view.status_reason
    assert [st for st in view.stages if st.stage.endswith("(retry)")]


@pytest.mark.parametrize(("mode", "says"), [
    ("500", "answered 500"), ("drop", "unreachable"), ("delay", "unreachable|timed out"),
])
def test_a_bmc_that_keeps_failing_ends_in_maintenance_and_fails_the_order(
    faulty: Platform, proxy: FaultProxy, tenant: TenantCtx, key: str, mode: str, says: str
) -> None:
    iid = order(faulty, tenant, key)
    proxy.set(mode, delay_s=2.0)
    Worker(faulty).run_until_idle(timeout_s=120)
    view = instances.show_instance(faulty, tenant.principal, iid)
    assert view.status == "failed"  # both emulated servers sit behind the failing proxy
    assert "after 3 attempts" in (view.status_reason or "")
    with faulty.db.read() as s:
        broken = [n for n in s.query(Node).all() if n.status == "maintenance"]
    assert len(broken) == 2
    import re
    assert all(re.search(says, n.status_reason or "") for n in broken), [
        n.status_reason for n in broken]


def test_a_stopped_bmc_sends_its_node_to_maintenance_and_the_order_moves_on(
    platform: Platform, image_server: str, server: LiveServer, tenant: TenantCtx, key: str,
    tmp_path: Path,
) -> None:
    impatient(platform, image_server, server)
    first, second = (start_emulator(tmp_path / n, count=1) for n in ("first", "second"))
    try:
        with platform.db.write() as s:
            add_node(s, platform, NodeSpec(
                name="rf-first", sku="h100-80g-x8", region="ningxia-1", bmc_driver="redfish",
                bmc_address=first.system_url(0), bmc_username=USER, bmc_password=PASSWORD))
        iid = order(platform, tenant, key)  # claims the only node: rf-first
        first.stop()  # its BMC goes away before the deploy starts
        with platform.db.write() as s:
            add_node(s, platform, NodeSpec(
                name="rf-second", sku="h100-80g-x8", region="ningxia-1",
                bmc_driver="redfish", bmc_address=second.system_url(0), bmc_username=USER,
                bmc_password=PASSWORD))
        Worker(platform).run_until_idle(timeout_s=120)
        view = instances.show_instance(platform, tenant.principal, iid)
        assert view.status == "ready", view.status_reason
        assert [n.name for n in view.nodes if n.status == "active"] == ["rf-second"]  # moved on
        with platform.db.read() as s:
            broken = s.query(Node).filter(Node.name == "rf-first").one()
        assert broken.status == "maintenance" and broken.instance_id is None
        assert "refused the connection" in (broken.status_reason or "")
        assert "after 3 attempts" in (broken.status_reason or "")
    finally:
        second.stop()
