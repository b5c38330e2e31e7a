"""What an instance costs, as its tenant reads it: an hour now (a bare-metal month's price
over its hours; a container's GPU-hours) and what it cost so far, refunds taken off; on the
API, `gpulease show` and the console's page, in both languages. SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpulease.api.app import create_app
from gpulease.cli.main import app
from gpulease.domain.errors import NotFound
from gpulease.platform import Platform
from gpulease.services.instances import actions
from gpulease.services.money.instance_cost import cost_of
from gpulease.testing.callers import TenantCtx, auth, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container, deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.web.console import signed_in


def test_an_hour_now_and_what_it_cost_so_far(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    bm = deliver(fleet, tenant, worker, key)  # an H100 month: ¥84,480 over its hours
    cost = cost_of(fleet, tenant.principal, bm)
    assert cost.spent == Decimal("84480.00")
    assert cost.per_hour is not None and abs(cost.per_hour * 24 * 30 - 84480) < 3500
    gpus = container(fleet, tenant, worker, key, gpus=2)
    per_hour = cost_of(fleet, tenant.principal, gpus).per_hour
    assert per_hour is not None and per_hour > 0
    clock.move(days=1)
    actions.release_instance(fleet, tenant.principal, bm)  # the month begun stays paid
    worker.run_until_idle()
    released = cost_of(fleet, tenant.principal, bm)
    assert released.per_hour is None and released.spent == Decimal("84480.00")
    with pytest.raises(NotFound):
        cost_of(fleet, new_tenant(fleet).principal, gpus)


def test_the_cost_on_the_api_the_cli_and_the_console(
    fleet: Platform, clock: MovableClock, server: LiveServer, tenant: TenantCtx,
    worker: Worker, key: str,
) -> None:
    bm = deliver(fleet, tenant, worker, key)
    said = httpx.get(f"{server.url}/api/v1/instances/{bm}/cost", headers=auth(tenant.token))
    assert said.status_code == 200 and said.json()["spent"] == "84480.00"
    shown = CliRunner().invoke(app, ["show", bm], env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "200"})
    assert shown.exit_code == 0 and "¥84,480.00 so far" in shown.output, shown.output
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, tenant, client)
        assert "¥84,480.00 so far" in client.get(f"/console/instances/{bm}").text
        client.post("/console/lang", data={"to": "zh_CN"})
        assert "至今 ¥84,480.00" in client.get(f"/console/instances/{bm}").text
