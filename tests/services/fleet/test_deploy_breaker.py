"""The deploy circuit breaker: deploys failing the same way stop sending nodes to
maintenance, are held and retried, alert operators, and resume when the cause is gone;
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.tables import Node
from gpulease.demo import seed_demo_fleet
from gpulease.domain.fleet.breaker import DeployOutcome, should_trip, signature
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import deploy_breaker
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.services.platform import control_metrics
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import sim
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

H100 = dict(sku="h100-80g-x8", region="ningxia-1")


def test_the_same_failure_trips_and_different_ones_do_not() -> None:
    a = "insert_media failed: simulated BMC: 401 Unauthorized at http://10.0.0.5:443/x"
    b = "insert_media failed: simulated BMC: 401 Unauthorized at http://10.0.0.9:443/x"
    assert signature(a) == signature(b)
    assert signature("stage wait_agent timed out after 900 s") != signature(a)
    assert signature("image http://h/media/config/aT2Iz7B4oXqCPNKzo26G_p2e9w.iso answered 404") \
        == signature("image http://h/media/config/VU-se8VvYv9pY8S3gRlieu-oNp4w.iso answered 404")
    assert signature("BmcPermanentError: 401") != signature("BmcTransientError: 401")
    fails = [DeployOutcome(False, a), DeployOutcome(False, b), DeployOutcome(False, a)]
    assert should_trip(fails, 3) is not None
    assert should_trip(fails[:2], 3) is None
    assert should_trip(fails[:2] + [DeployOutcome(True)], 3) is None
    assert should_trip(fails[:2] + [DeployOutcome(False, "power_on failed")], 3) is None


def _drain(worker: Worker) -> None:
    for _ in range(10_000):  # bounded
        if not worker.step():
            return


def _counts(p: Platform) -> dict[str, int]:
    with p.db.read() as s:
        return {st: n for st, n in s.execute(
            select(Node.status, func.count()).where(Node.sku == H100["sku"],
                                                    Node.region == H100["region"])
            .group_by(Node.status))}


def test_a_media_server_outage_holds_deploys_instead_of_emptying_the_pool(
    platform: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    platform.settings.breaker_failures = 3
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    platform.clock = clock
    seed_demo_fleet(platform, 6)
    with platform.db.read() as s:
        names = list(s.scalars(select(Node.name).where(Node.sku == H100["sku"],
                                                       Node.region == H100["region"])))
    for name in names:  # every BMC fails to fetch the image: the media server is down
        sim(platform).inject_fault(name, "insert_media", "permanent", times=100)
    worker = Worker(platform)
    first = orders.place_order(platform, tenant.principal,
                               OrderRequest(ssh_keys=[key], **H100))[0].id
    _drain(worker)
    # two nodes went to maintenance (the order moved on), the third failure opened it
    assert _counts(platform) == {"maintenance": 2, "deploying": 1, "available": 3}
    view = deploy_breaker.view(platform, operator.principal)
    assert view.status == "open" and view.held_deploys == 1
    assert "the latest 3 deploys failed the same way: attach_media failed" in view.reason
    assert instances.show_instance(platform, tenant.principal, first).status == "deploying"
    # more orders while it is open: held too, no more nodes to maintenance
    second = orders.place_order(platform, tenant.principal,
                                OrderRequest(ssh_keys=[key], **H100))[0].id
    _drain(worker)
    assert _counts(platform) == {"maintenance": 2, "deploying": 2, "available": 2}
    # held deploys retry on their own later, and are held again while it lasts
    clock.move(seconds=platform.settings.breaker_retry_s + 1)
    _drain(worker)
    assert _counts(platform)["maintenance"] == 2
    metrics = {f.name: f for f in text_string_to_metric_families(
        control_metrics.render(platform).decode())}
    assert metrics["gpulease_deploy_breaker_open"].samples[0].value == 1
    assert metrics["gpulease_deploys_held"].samples[0].value == 2

    with LiveServer(platform) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        shown = CliRunner().invoke(app, ["breaker"], env=env)
        assert shown.exit_code == 0 and "open since" in shown.output
        assert "2 deploys held" in shown.output
        assert httpx.get(f"{server.url}/api/v1/breaker",
                         headers=auth(tenant.token)).status_code == 403
        for name in names:  # the media server is back
            sim(platform).clear_faults(name)
        reset = CliRunner().invoke(app, ["breaker", "reset"], env=env)
        assert reset.exit_code == 0 and "closed" in reset.output
        assert httpx.post(f"{server.url}/api/v1/breaker/reset",
                          headers=auth(operator.token)).status_code == 409
    _drain(worker)
    for iid in (first, second):
        assert instances.show_instance(platform, tenant.principal, iid).status == "ready"
    assert deploy_breaker.view(platform, operator.principal).held_deploys == 0


def test_a_held_deploy_that_succeeds_closes_the_breaker(
    platform: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    platform.settings.breaker_failures = 2
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    platform.clock = clock
    seed_demo_fleet(platform, 3)
    with platform.db.read() as s:
        names = list(s.scalars(select(Node.name).where(Node.sku == H100["sku"],
                                                       Node.region == H100["region"])))
    for name in names:  # agents cannot phone home
        sim(platform).inject_fault(name, "agent_configure", "permanent", times=100)
    worker = Worker(platform)
    iid = orders.place_order(platform, tenant.principal,
                             OrderRequest(ssh_keys=[key], **H100))[0].id
    _drain(worker)
    assert deploy_breaker.view(platform, operator.principal).status == "open"
    for name in names:
        sim(platform).clear_faults(name)
    clock.move(seconds=platform.settings.breaker_retry_s + 1)
    _drain(worker)
    assert instances.show_instance(platform, tenant.principal, iid).status == "ready"
    view = deploy_breaker.view(platform, operator.principal)
    assert view.status == "closed" and "deployed" in (view.reason or "")
    assert _counts(platform) == {"maintenance": 1, "active": 1, "available": 1}
