"""The control plane watched: /readyz says whether this process can serve (database,
schema, its key; not the workers), /metrics gives the fleet's and the pipelines' figures to
Prometheus (with the metrics token or an operator's), and the worker registry knows which
worker is alive, dead or stopped. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from gpulease.db.tables import WorkerProcess
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.orders import ordering as orders
from gpulease.services.platform import workers
from gpulease.services.platform.control_metrics import serve_worker_metrics
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.servers import LiveServer, free_port
from gpulease.worker.runner import Worker


def scrape(server: LiveServer, token: str) -> dict[str, object]:
    r = httpx.get(f"{server.url}/metrics", headers=auth(token))
    assert r.status_code == 200, r.text
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(families: dict[str, object], name: str, **labels: str) -> float:
    """A sample by its own name (a histogram's _bucket and _count included)."""
    for family in families.values():
        for sample in family.samples:  # type: ignore[attr-defined]
            if sample.name == name and all(sample.labels.get(k) == v
                                           for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no {name} {labels}")


def test_readiness_metrics_and_the_worker_registry(
    fleet: Platform, server: LiveServer, operator: TenantCtx, tenant: TenantCtx, key: str,
) -> None:
    # no worker: the API still serves (a balancer must not take it out); the count is said
    no_worker = httpx.get(f"{server.url}/readyz")
    assert no_worker.status_code == 200
    assert no_worker.json() == {"ready": True, "workers_live": 0, "checks": {
        "database": "ok", "schema": "ok", "key": "ok"}}
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    assert httpx.get(f"{server.url}/metrics", headers=auth(tenant.token)).status_code == 403
    fleet.settings.metrics_token = "prom-secret-1"
    assert httpx.get(f"{server.url}/metrics",
                     headers=auth("prom-secret-1")).status_code == 200

    orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    before = scrape(server, operator.token)
    assert value(before, "gpulease_workers_live") == 0
    assert value(before, "gpulease_instances", status="pending") == 1
    assert value(before, "gpulease_nodes", status="available", region="ningxia-1") >= 1
    assert value(before, "gpulease_delivery_oldest_waiting_seconds") >= 0

    worker = Worker(fleet, owner="metrics-worker")
    worker.start(1)
    try:
        worker_ready = httpx.get(f"{server.url}/readyz")
        assert worker_ready.status_code == 200 and worker_ready.json()["workers_live"] == 1
        for _ in range(200):  # bounded: the order is delivered
            if value(scrape(server, operator.token), "gpulease_delivery_seconds_count") == 1:
                break
            import time

            time.sleep(0.05)
        after = scrape(server, operator.token)
        assert value(after, "gpulease_workers_live") == 1
        assert value(after, "gpulease_delivery_seconds_bucket", le="+Inf") == 1
        listed = httpx.get(f"{server.url}/api/v1/workers",
                           headers=auth(operator.token)).json()["items"]
        assert [(w["owner"], w["state"]) for w in listed] == [("metrics-worker", "alive")]
    finally:
        worker.stop()
    stopped = httpx.get(f"{server.url}/api/v1/workers", params={"stopped": True},
                        headers=auth(operator.token)).json()["items"]
    assert [w["state"] for w in stopped] == ["stopped"]

    workers.register(fleet, "killed-worker", 4)  # then SIGKILLed: never seen again
    with fleet.db.write() as s:
        s.execute(update(WorkerProcess).where(WorkerProcess.owner == "killed-worker")
                  .values(seen_at=fleet.clock.now() - timedelta(minutes=5)))
    dead = workers.list_workers(fleet, operator.principal)
    assert [(w.owner, w.state) for w in dead] == [("killed-worker", "dead")]
    assert httpx.get(f"{server.url}/readyz").status_code == 200  # the API serves on
    silent = scrape(server, operator.token)
    assert value(silent, "gpulease_worker_last_seen_seconds", worker="killed-worker") >= 300
    with fleet.db.write() as s:  # long dead: it leaves the metrics (its alert stops)
        s.execute(update(WorkerProcess).where(WorkerProcess.owner == "killed-worker")
                  .values(seen_at=fleet.clock.now() - timedelta(minutes=20)))
    gone = scrape(server, operator.token)
    try:
        value(gone, "gpulease_worker_last_seen_seconds", worker="killed-worker")
        raise AssertionError("a worker dead for 20 minutes is still exported")
    except AssertionError as missing:
        assert "no gpulease_worker_last_seen_seconds" in str(missing)


def test_a_worker_serves_its_own_metrics_with_bmc_errors_by_kind(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    fleet.settings.worker_metrics_port = free_port()
    fleet.settings.metrics_token = "scrape-me"
    stop = serve_worker_metrics(fleet)
    assert stop is not None
    try:
        view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
        fleet.drivers.fleet.inject_fault(  # type: ignore[union-attr]
            view.nodes[0].name, "power_on", "transient", times=2)
        Worker(fleet).run_until_idle()
        url = f"http://127.0.0.1:{fleet.settings.worker_metrics_port}/metrics"
        assert httpx.get(url).status_code == 401
        text = httpx.get(url, headers=auth("scrape-me")).text
    finally:
        stop()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    errors = samples[("gpulease_bmc_call_errors_total",
                      (("driver", "simulated"), ("kind", "server_error")))]
    assert errors >= 2
    assert samples[("gpulease_periodic_runs_total", (("job", "leases"),))] >= 1
    assert ("gpulease_nodes", (("region", "ningxia-1"), ("stage", ""),
                               ("status", "active"))) in samples


def test_a_process_whose_key_was_rotated_away_is_not_ready(
    platform: Platform, server: LiveServer
) -> None:
    from gpulease.db.tables import PlatformFact
    from gpulease.services.platform.keys import FINGERPRINT

    with platform.db.write() as s:  # `gpulease key rotate` ran from another process
        fact = s.get(PlatformFact, FINGERPRINT)
        if fact is None:
            s.add(PlatformFact(name=FINGERPRINT, value="the-new-key"))
        else:
            fact.value = "the-new-key"
    answer = httpx.get(f"{server.url}/readyz")
    assert answer.status_code == 503 and "not the installation's" in answer.json()["checks"][
        "key"]
    assert "version" not in answer.json() and "version" not in httpx.get(
        f"{server.url}/healthz").json()


def test_metrics_count_requests_by_route_and_show_the_process(
    platform: Platform, server: LiveServer, operator: TenantCtx, tenant: TenantCtx
) -> None:
    for _ in range(3):
        assert httpx.get(f"{server.url}/api/v1/instances/ins-nope",
                         headers=auth(tenant.token)).status_code == 404
    seen = scrape(server, operator.token)
    route = "/api/v1/instances/{instance_id}"  # the template: never a series per id
    assert value(seen, "gpulease_http_requests_total", route=route, method="GET",
                 status="404") >= 3
    assert value(seen, "gpulease_http_request_seconds_count", route=route, method="GET") >= 3
    assert value(seen, "process_resident_memory_bytes") > 0
    assert value(seen, "process_open_fds") > 0
    assert value(seen, "gpulease_db_pool_connections_in_use") >= 0
    assert not any("ins-nope" in str(s.labels) for f in seen.values()  # type: ignore[attr-defined]
                   for s in f.samples)  # type: ignore[attr-defined]
