"""Tenants as operators manage them: the list, suspension (orders refused, machines kept),
reinstatement, and closing once nothing is rented, unbilled or owed; over HTTP and the CLI,
on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import tenants
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, auth, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def test_suspend_refuses_orders_keeps_machines_and_close_waits_for_everything(
    fleet: Platform, server: LiveServer, operator: TenantCtx, key: str
) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    worker = Worker(fleet)
    acme = new_tenant(fleet, "acme")
    other = new_tenant(fleet, "other")
    iid = deliver(fleet, acme, worker, key)
    op = operator.principal

    page = tenants.list_tenants(fleet, op)
    rows = {t.name: t for t in page.items}
    assert page.total == 2 and rows["acme"].live_instances == 1 and rows["acme"].users == 1
    assert rows["other"].status == "active" and rows["other"].balance == 100_000_000
    with pytest.raises(Forbidden):
        tenants.list_tenants(fleet, acme.principal)
    with pytest.raises(InvalidInput, match="Say why"):
        tenants.suspend(fleet, op, acme.tenant_id, " ")

    suspended = tenants.suspend(fleet, op, "acme", "abuse report #7 (port scans)")
    assert suspended.status == "suspended"
    with pytest.raises(Forbidden, match=r"suspended \(abuse report #7"):
        orders.place_order(fleet, acme.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    assert instances.show_instance(fleet, acme.principal, iid).status == "ready"  # kept
    refused = httpx.post(f"{server.url}/api/v1/instances", headers=auth(acme.token), json={
        "kind": "container", "offer": "rtx4090-24g-container", "gpus": 1, "ssh_keys": [key]})
    assert refused.status_code == 403 and "contact the provider" in refused.json()["detail"]
    assert [t.name for t in tenants.list_tenants(fleet, op, "suspended").items] == ["acme"]
    with pytest.raises(Conflict):
        tenants.suspend(fleet, op, "acme", "again")
    assert tenants.reinstate(fleet, op, "acme").status == "active"
    with pytest.raises(Conflict, match="not suspended"):
        tenants.reinstate(fleet, op, "acme")

    with pytest.raises(Conflict) as why:
        tenants.close(fleet, op, "acme", None)
    assert "1 instances are not released" in str(why.value)
    assert "on no final invoice" in str(why.value)
    actions.release_instance(fleet, acme.principal, iid)
    worker.run_until_idle()
    clock.at = datetime(2027, 1, 2, 9, 0, tzinfo=UTC)
    invoice_run.run_invoices(fleet, op, "2026-12", finalize=True)
    with pytest.raises(Conflict, match="left in the wallet") as why:
        tenants.close(fleet, op, "acme", None)
    assert "instances" not in str(why.value) and "invoice" not in str(why.value)
    balance = wallet.show_wallet(fleet, op, acme.tenant_id).balance
    wallet.payout(fleet, op, acme.tenant_id, balance, "bank-refund-1")

    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
    closed = CliRunner().invoke(app, ["tenant", "close", "acme", "--reason", "moved away"],
                                env=env)
    assert closed.exit_code == 0, closed.output
    assert "closed — moved away" in closed.output
    assert httpx.get(f"{server.url}/api/v1/me", headers=auth(acme.token)).status_code == 401
    listed = CliRunner().invoke(app, ["tenants", "--status", "closed", "--json"], env=env)
    assert listed.exit_code == 0 and '"acme"' in listed.output and '"other"' not in listed.output
    assert httpx.get(f"{server.url}/api/v1/me", headers=auth(other.token)).status_code == 200
    again = httpx.post(f"{server.url}/api/v1/tenants/acme/close", headers=auth(operator.token))
    assert again.status_code == 409
    # the CLI asks for the terminal's language: the refusal in Chinese, in English without
    for lang, said in (("zh_CN.UTF-8", "租户 acme 已经关闭。"),
                       ("C.UTF-8", "Tenant acme is closed already.")):
        refused = CliRunner().invoke(app, ["tenant", "close", "acme"],
                                     env=env | {"LANG": lang, "LANGUAGE": "", "LC_ALL": "",
                                                "LC_MESSAGES": "", "GPULEASE_LANG": ""})
        assert refused.exit_code == 1 and said in refused.output, refused.output
