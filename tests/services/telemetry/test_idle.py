"""Idle GPUs from the platform's own telemetry: the share of the last hour and day each
GPU and each instance sat under the threshold, weighed by the windows' lengths (a window
that claims more than an hour counts an hour); over the API (the tenant's own only) and the
CLI. SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpulease.api.app import create_app
from gpulease.cli.main import app
from gpulease.domain.errors import NotFound
from gpulease.platform import Platform
from gpulease.services.telemetry import idle
from gpulease.services.telemetry.pushes import ingest
from gpulease.testing.callers import TenantCtx, auth, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import delivered_with_agent, window
from gpulease.testing.servers import LiveServer
from tests.web.console import signed_in

HOUR = 3600.0


def push_hours(p: Platform, clock: MovableClock, credential: str, hours: int,
               util: dict[int, float], length_s: float = HOUR) -> None:
    """`hours` pushes an hour apart, each a window of `length_s` with GPU i at util[i]."""
    shape = window()
    for h in range(hours):
        clock.move(hours=1)
        ingest(p, credential, [{**g, "start": h * HOUR, "end": h * HOUR + length_s,
                                "util_avg_pct": util[int(g["index"])]} for g in shape])


def test_idle_shares_per_gpu_and_instance_over_the_hour_and_the_day(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    iid, _, credential = delivered_with_agent(fleet, tenant, key)
    half_idle = {i: 0.5 if i < 4 else 80.0 for i in range(8)}  # GPUs 0-3 idle
    push_hours(fleet, clock, credential, 23, half_idle)
    push_hours(fleet, clock, credential, 1, dict.fromkeys(range(8), 90.0))  # all busy now
    view = idle.instance_idle(fleet, tenant.principal, iid)
    assert view.threshold_pct == 5.0 and view.gpus == 8
    by_gpu = {g.index: g for g in view.per_gpu}
    assert by_gpu[0].day.idle_pct == pytest.approx(100 * 23 / 24, abs=0.1)
    assert by_gpu[7].day.idle_pct == 0.0 and by_gpu[0].hour.idle_pct == 0.0
    assert view.day.idle_pct == pytest.approx(100 * 23 / 48, abs=0.1)  # four GPUs of eight
    assert view.day.seen_s == pytest.approx(24 * HOUR)
    assert view.hour.idle_pct == 0.0 and view.hour.seen_s == pytest.approx(HOUR)

    push_hours(fleet, clock, credential, 1, dict.fromkeys(range(8), 1.0), length_s=10**6)
    longest = idle.instance_idle(fleet, tenant.principal, iid).hour
    assert longest.idle_pct == 100.0 and longest.seen_s == HOUR  # an hour, whatever it said
    listed = idle.tenant_idle(fleet, tenant.principal)
    assert [v.instance_id for v in listed] == [iid]
    with pytest.raises(NotFound):
        idle.instance_idle(fleet, new_tenant(fleet).principal, iid)


def test_an_instance_without_telemetry_says_so(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    iid, _, _ = delivered_with_agent(fleet, tenant, key)
    view = idle.instance_idle(fleet, tenant.principal, iid)
    assert view.day.idle_pct is None and view.day.seen_s == 0 and view.per_gpu == []


def test_idle_over_http_and_the_cli(
    fleet: Platform, clock: MovableClock, server: LiveServer, tenant: TenantCtx, key: str,
) -> None:
    iid, _, credential = delivered_with_agent(fleet, tenant, key)
    push_hours(fleet, clock, credential, 2, dict.fromkeys(range(8), 0.0))
    api = f"{server.url}/api/v1"
    one = httpx.get(f"{api}/instances/{iid}/idle", headers=auth(tenant.token))
    assert one.status_code == 200 and one.json()["hour"]["idle_pct"] == 100.0
    stranger = new_tenant(fleet)
    assert httpx.get(f"{api}/instances/{iid}/idle",
                     headers=auth(stranger.token)).status_code == 404
    assert httpx.get(f"{api}/idle", headers=auth(stranger.token)).json() == {
        "items": [], "total": 0, "limit": 100, "offset": 0}
    shown = CliRunner().invoke(app, ["instances", "--idle"], env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert iid in shown.output and "100 %" in shown.output and "under 5 %" in shown.output
    with TestClient(create_app(fleet)) as client:  # the console's instance page, both ways
        signed_in(fleet, tenant, client)
        page = client.get(f"/console/instances/{iid}").text
        assert 'id="idle"' in page and "100 % of the last hour" in page
        assert '<td class="num idle">100 %</td>' in client.get("/console/").text  # the list
        client.post("/console/lang", data={"to": "zh_CN"})
        assert "空闲（近一小时）" in client.get(f"/console/instances/{iid}").text
