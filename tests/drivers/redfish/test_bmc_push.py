"""BMCs that push their alerts: the platform subscribes to a Redfish EventService (a peer
over real HTTP, tests/drivers/redfish/events.py), the BMC delivers an Event to the
platform's own HTTP server, and a critical GPU record becomes a hardware alert. A delivery
without the subscription's Context is refused; a dropped subscription is made again with a
new Context, and the old one stops working. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlalchemy import select, update

from gpulease.db.tables import HardwareAlert, Node
from gpulease.drivers.redfish import RedfishDriver
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import EnrollRequest
from gpulease.services.fleet import enrollment
from gpulease.services.fleet.bmc_health import events_url
from gpulease.testing.callers import TenantCtx
from gpulease.testing.redfish_trees.vendor_trees import write_dell_like
from gpulease.testing.servers import LiveServer
from gpulease.worker.jobs.fleet.bmc_logs import check_bmc_logs
from tests.drivers.redfish.events import EventingBmc
from tests.fixtures.redfish import PASSWORD, USER

SYSTEM = "/redfish/v1/Systems/System.Embedded.1"


def test_the_driver_subscribes_where_offered_and_sees_a_dropped_subscription(
    tmp_path: Path,
) -> None:
    write_dell_like(tmp_path / "dell")
    on, off = EventingBmc(tmp_path / "dell"), EventingBmc(tmp_path / "dell", enabled=False)
    driver = RedfishDriver(timeout_s=5)
    try:
        bmc = driver.bmc(BmcEndpoint("xe", on.url + SYSTEM, USER, PASSWORD))
        uri = bmc.subscribe_events("http://127.0.0.1:9/api/v1/bmc-events/n1", "glbe_x")
        assert uri == "/redfish/v1/EventService/Subscriptions/1"
        assert on.subscriptions[uri]["EventTypes"] == ["Alert"]  # the service lists it
        assert on.subscriptions[uri]["Context"] == "glbe_x"
        assert bmc.subscription_alive(uri)
        on.drop_subscriptions()
        assert not bmc.subscription_alive(uri)
        disabled = driver.bmc(BmcEndpoint("xe2", off.url + SYSTEM, USER, PASSWORD))
        assert disabled.subscribe_events("http://127.0.0.1:9/x", "glbe_y") is None
        assert not any("Subscriptions" in p for p in off.posted)  # switched off: not asked
    finally:
        on.stop()
        off.stop()


def test_a_pushed_gpu_fault_becomes_an_alert_and_only_the_subscriber_may_push(
    platform: Platform, operator: TenantCtx, tmp_path: Path,
) -> None:
    write_dell_like(tmp_path / "dell")
    peer = EventingBmc(tmp_path / "dell")
    try:
        with LiveServer(platform) as live:
            platform.settings.public_url = live.url
            node = enrollment.enroll(platform, operator.principal, EnrollRequest(
                bmc=peer.url + SYSTEM, username=USER, password=PASSWORD,
                offer="h100-80g-x8@ningxia-1"))
            assert node.status == "available", node.status_reason
            assert not any("Subscriptions" in p for p in peer.posted)  # not at enrollment
            with platform.db.write() as s:  # rented: its BMC is watched
                s.execute(update(Node).where(Node.id == node.id).values(status="active"))
            check_bmc_logs(platform)
            (first,) = peer.subscriptions.values()
            assert first["Destination"] == events_url(platform, node.id)

            assert peer.fire("Critical", "The GPU in slot 4 is not responding. GPU4") == [202]
            assert peer.fire("Critical", "The GPU in slot 4 is not responding. GPU4",
                             event_id="2") == [202]  # the same fault again: one alert
            with platform.db.read() as s:
                alerts = s.scalars(select(HardwareAlert).where(
                    HardwareAlert.node_id == node.id)).all()
            assert [(a.kind, a.gpu_index, a.source) for a in alerts] == [("bmc_gpu", 4, "bmc")]
            assert "GPU in slot 4 is not responding" in alerts[0].message

            forged = {"Context": "glbe_guess", "Events": [{
                "MessageSeverity": "Critical", "Message": "PSU 1 failed"}]}
            answer = httpx.post(events_url(platform, node.id), json=forged)
            assert answer.status_code == 401 and "Context" in answer.json()["detail"]
            bad = httpx.post(events_url(platform, node.id), json={"Context": "x"})
            assert bad.status_code == 422 and "Events" in bad.text

            peer.drop_subscriptions()  # deliveries failed too often, say
            old_context = first["Context"]
            platform.settings.bmc_log_interval_subscribed_s = 0.001
            check_bmc_logs(platform)
            (second,) = peer.subscriptions.values()
            assert second["Context"] != old_context
            stale = {"Context": old_context, "Events": []}
            assert httpx.post(events_url(platform, node.id), json=stale).status_code == 401
            assert peer.fire("Critical", "Power supply 2 lost input") == [202]
        with platform.db.read() as s:
            kinds = sorted(s.scalars(select(HardwareAlert.kind).where(
                HardwareAlert.node_id == node.id)))
        assert kinds == ["bmc_gpu", "bmc_psu"]
    finally:
        peer.stop()
