"""The BMC's own logs as evidence: critical GPU, memory, PSU and thermal entries of a
rented node's SEL become hardware alerts (source `bmc`, the BMC's message) on a schedule,
each entry once, and close when the BMC's health is OK again; the Redfish driver reads the
SEL where iDRAC keeps it (under the manager), every page of it. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, text, update

from gpulease.db.tables import HardwareAlert, Instance, Node
from gpulease.domain.fleet.bmc_events import (
    BmcFault,
    LogEntry,
    classify,
    cursor,
    gpu_index,
    new_entries,
)
from gpulease.drivers.redfish import RedfishDriver
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcLog
from gpulease.services.fleet.bmc_health import record_log
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, sim
from gpulease.testing.redfish_trees.mockup import serve_mockup
from gpulease.testing.redfish_trees.vendor_trees import write_dell_like, write_sel
from gpulease.worker.jobs.fleet.bmc_logs import check_bmc_logs
from gpulease.worker.runner import Worker
from tests.fixtures.redfish import PASSWORD, USER


def _e(message: str, severity: str = "Critical", created: str = "2026-12-01T10:00:00Z",
       ident: str = "1", service: str = "sel") -> LogEntry:
    return LogEntry(service, ident, created, severity, message)


def test_critical_entries_are_classified_and_read_once() -> None:
    assert classify(_e("GPU 3 has fallen off the bus (Xid 79)")) == BmcFault.GPU
    assert gpu_index(_e("GPU 3 has fallen off the bus")) == 3
    assert classify(_e("Multi-bit memory errors detected on DIMM A1")) == BmcFault.MEMORY
    assert classify(_e("Power supply 2 is lost")) == BmcFault.PSU
    assert classify(_e("The system inlet temperature is above the upper critical "
                       "threshold")) == BmcFault.THERMAL
    assert classify(_e("CPU 1 Temp has exceeded the critical threshold")) == BmcFault.THERMAL
    assert classify(_e("CPU0_TEMP: Upper Critical - going high")) == BmcFault.THERMAL
    assert classify(_e("Template saved")) is None
    # a PCIe error in a slot (the GPUs' on an 8-GPU server) is a GPU's, not memory's
    pcie = _e("Uncorrectable PCI Express Error detected on Slot 3")
    assert classify(pcie) == BmcFault.GPU and gpu_index(pcie) == -1
    assert classify(_e("Power supply 2 is lost", severity="Warning")) is None
    assert classify(_e("The chassis cover was opened")) is None
    old = (_e("old", ident="1", created="2026-11-01T00:00:00Z"),)
    seen = cursor(("sel", "events"), old, {})
    assert new_entries(old, {}) == []  # the first look takes nothing old
    later = old + (_e("new", ident="2", created="2026-12-01T00:00:00Z"),
                   _e("first of its log", ident="1", service="events"))
    assert [e.message for e in new_entries(later, seen)] == ["new", "first of its log"]
    assert new_entries(later, cursor(("sel", "events"), later, seen)) == []


def test_a_rented_node_s_bmc_log_opens_and_closes_alerts(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, tzinfo=UTC))
    fleet.clock = clock
    iid = deliver(fleet, tenant, worker, key)
    name = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    clock.move(minutes=6)
    assert check_bmc_logs(fleet) == 0  # read already while it deployed: nothing new
    sim(fleet).add_bmc_log(name, "Critical", "GPU 5 has fallen off the bus", "2026-12-01T09:07Z")
    sim(fleet).add_bmc_log(name, "OK", "Log cleared", "2026-12-01T09:08Z")
    assert check_bmc_logs(fleet) == 0  # not due yet (every 5 minutes)
    clock.move(minutes=6)
    assert check_bmc_logs(fleet) == 1
    with fleet.db.read() as s:
        (alert,) = s.scalars(select(HardwareAlert).where(HardwareAlert.source == "bmc")).all()
    assert (alert.kind, alert.gpu_index, alert.instance_id) == ("bmc_gpu", 5, iid)
    assert "GPU 5 has fallen off the bus" in alert.message and alert.closed_at is None
    stages = [st.stage for st in instances.show_instance(fleet, tenant.principal, iid).stages]
    assert "bmc_alert" in stages
    clock.move(minutes=6)
    assert check_bmc_logs(fleet) == 0  # each entry once
    sim(fleet).set_bmc_health(name, "OK")
    clock.move(minutes=6)
    check_bmc_logs(fleet)
    with fleet.db.read() as s:
        closed = s.scalar(select(HardwareAlert.closed_at).where(HardwareAlert.id == alert.id))
    assert closed == clock.now()


GPU4_DOWN = ("2026-12-01T09:30:00Z", "Critical", "The GPU in slot 4 is not responding. GPU4",
             "PCI3020")


def _dell_sel(tmp_path: Path, entries: list[tuple[str, str, str, str]], page_size: int = 0
              ) -> BmcLog:
    """The event log the Redfish driver reads from a Dell-like tree with this SEL, served
    over HTTP."""
    write_dell_like(tmp_path / "dell")
    write_sel(tmp_path / "dell", entries, page_size)
    bmc = serve_mockup(tmp_path / "dell")
    try:
        return RedfishDriver(timeout_s=5).bmc(BmcEndpoint(
            "xe", f"{bmc.url}/redfish/v1/Systems/System.Embedded.1", USER, PASSWORD)
        ).event_log()
    finally:
        bmc.stop()


def test_the_redfish_driver_reads_the_sel_under_the_manager(tmp_path: Path) -> None:
    read = _dell_sel(tmp_path, [
        ("2026-12-01T08:00:00Z", "OK", "The process of installing an operating system "
         "completed successfully.", "OSE1002"), GPU4_DOWN])
    assert read.services == ("/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel",)
    assert [e.severity for e in read.entries] == ["OK", "Critical"]
    critical = read.entries[1]
    assert classify(critical) == BmcFault.GPU and critical.message_id == "PCI3020"


def test_a_paged_sel_is_read_to_its_last_page(tmp_path: Path) -> None:
    read = _dell_sel(tmp_path, [
        (f"2026-12-01T08:{i:02d}:00Z", "OK", f"Event {i}", "SYS1003") for i in range(11)]
        + [GPU4_DOWN], page_size=5)  # three pages: the fault on the last
    assert [e.message for e in read.entries][:2] == ["Event 0", "Event 1"]
    assert len(read.entries) == 12 and classify(read.entries[-1]) == BmcFault.GPU


def test_a_subscribed_node_is_polled_hourly_and_resubscribed_when_dropped(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, tzinfo=UTC))
    fleet.clock = clock
    iid = deliver(fleet, tenant, worker, key)
    name = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    sim(fleet).offer_event_service(name)
    with fleet.db.write() as s:  # as if never read: asked to subscribe at the next read
        s.execute(update(Node).where(Node.name == name).values(bmc_checked_at=None,
                                                                bmc_subscription=None))
    check_bmc_logs(fleet)
    held = sim(fleet).snapshot(name)["subscription"]
    assert held["destination"].endswith("/api/v1/bmc-events/" + _node_id(fleet, name))
    sim(fleet).add_bmc_log(name, "Critical", "GPU 2 has fallen off the bus", "2026-12-01T09:07Z")
    clock.move(minutes=30)
    assert check_bmc_logs(fleet) == 0  # pushed alerts come by themselves: read hourly
    clock.move(minutes=31)
    assert check_bmc_logs(fleet) == 1  # the safety net: what the push may have lost
    sim(fleet).offer_event_service(name, False)
    sim(fleet).offer_event_service(name)  # the BMC dropped the subscription
    clock.move(minutes=61)
    check_bmc_logs(fleet)
    again = sim(fleet).snapshot(name)["subscription"]
    assert again is not None and again["context"] != held["context"]


def _node_id(p: Platform, name: str) -> str:
    with p.db.read() as s:
        return str(s.scalar(select(Node.id).where(Node.name == name)))


def test_the_sweep_locks_the_instance_before_the_node(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    """The lock order (instance, then node) held by the BMC sweep: while a step holds a
    rented node's instance and then locks the node, a BMC read that opens an alert on that
    node waits for the step instead of holding the node and waiting for the instance (a
    deadlock PostgreSQL ended once a minute under the race bench)."""
    if fleet.db.dialect != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    iid = deliver(fleet, tenant, worker, key)
    with fleet.db.read() as s:
        node_id = s.scalars(select(Node.id).where(Node.instance_id == iid)).first()
    assert node_id is not None
    read = BmcLog("Critical", ("sel",), (_e("GPU 5 has fallen off the bus", ident="99",
                                            created="2027-01-01T00:00:00Z"),))
    opened: list[int] = []
    sweep = threading.Thread(target=lambda: opened.append(record_log(fleet, node_id, read)))
    with fleet.db.write() as s:  # the step: the instance first...
        s.execute(select(Instance.id).where(Instance.id == iid).with_for_update())
        sweep.start()
        time.sleep(1.5)  # the sweep is in (waiting for the instance, or holding the node)
        s.execute(text("SET LOCAL lock_timeout = '10s'"))
        s.execute(select(Node.id).where(Node.id == node_id).with_for_update())  # ...the node
    sweep.join(30)
    assert opened == [1]
