"""GPU quotas the operator sets on a tenant: in all and per offer (its share of an offer's
stock); an order beyond one is refused with the quota, the use and who raises it, and
nothing of it is kept; two orders at once cannot both pass one quota; a release frees it.
SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.tables import Instance
from gpulease.domain.errors import Forbidden, InvalidInput, QuotaExceeded
from gpulease.platform import Platform
from gpulease.services.accounts import quotas
from gpulease.services.instances import actions
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.factories import at_once, place
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

H100 = {"sku": "h100-80g-x8", "region": "ningxia-1"}
RTX = {"sku": "rtx4090-24g-x8", "region": "sichuan-2"}


def live_orders(p: Platform, t: TenantCtx) -> int:
    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(Instance).where(
            Instance.tenant_id == t.tenant_id, Instance.status != "released")) or 0


def test_an_offer_quota_and_an_overall_quota_refuse_what_is_beyond_them(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    quotas.set_quota(fleet, operator.principal, tenant.tenant_id, "h100-80g-x8@ningxia-1", 8,
                     "two H100 servers in Ningxia: one per tenant")
    first = place(fleet, tenant, key, **H100)
    with pytest.raises(QuotaExceeded) as refused:
        place(fleet, tenant, key, **H100)
    said = refused.value.detail
    assert refused.value.status == 409
    assert "for h100-80g-x8@ningxia-1 is 8 at once: you hold 8 and this order needs 8" in said
    assert "ask the provider to raise the quota" in said
    assert live_orders(fleet, tenant) == 1  # nothing of the refused order was kept

    quotas.set_quota(fleet, operator.principal, tenant.tenant_id, "*", 16)
    place(fleet, tenant, key, **RTX)  # 16 in all: at the quota, not beyond it
    with pytest.raises(QuotaExceeded, match="in all is 16 at once: you hold 16"):
        place(fleet, tenant, key, **RTX)
    listed = {q.offer: (q.max_gpus, q.held) for q in quotas.list_quotas(fleet, tenant.principal)}
    assert listed == {"*": (16, 16), "h100-80g-x8@ningxia-1": (8, 8)}

    worker.run_until_idle()
    actions.release_instance(fleet, tenant.principal, first)
    worker.run_until_idle()
    place(fleet, tenant, key, **H100)  # released: its GPUs count no more
    quotas.remove_quota(fleet, operator.principal, tenant.tenant_id, "*")
    quotas.remove_quota(fleet, operator.principal, tenant.tenant_id, "h100-80g-x8@ningxia-1")
    assert quotas.list_quotas(fleet, tenant.principal) == []  # none left to check
    place(fleet, tenant, key, **H100)  # no quota left: the last free H100 is its to take


def test_two_orders_at_once_cannot_both_pass_one_quota(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str,
) -> None:
    quotas.set_quota(fleet, operator.principal, tenant.tenant_id, "h100-80g-x8@ningxia-1", 8)
    outcomes = at_once(2, lambda: place(fleet, tenant, key, **H100), QuotaExceeded)
    assert outcomes == ["done", "refused"]  # two free H100s, one allowed
    assert live_orders(fleet, tenant) == 1


def test_quotas_are_the_operator_s_to_set_and_checked(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx,
) -> None:
    with pytest.raises(Forbidden):
        quotas.set_quota(fleet, tenant.principal, tenant.tenant_id, "*", 64)
    with pytest.raises(InvalidInput) as bad:
        quotas.set_quota(fleet, operator.principal, tenant.tenant_id, "h100@mars-1", 8)
    assert bad.value.field == "offer" and "h100-80g-x8@ningxia-1" in (bad.value.accepted or [])


def test_quotas_over_http_and_the_cli(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx, key: str,
) -> None:
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token, "COLUMNS": "200"}
    done = CliRunner().invoke(app, ["quota", "set", tenant.tenant_id, "h100-80g-x8@ningxia-1",
                                    "8", "--reason", "scarce"], env=env)
    assert done.exit_code == 0, done.output
    api = f"{server.url}/api/v1"
    order = {"ssh_keys": [key], **H100}
    assert httpx.post(f"{api}/instances", headers=auth(tenant.token),
                      json=order).status_code == 201
    refused = httpx.post(f"{api}/instances", headers=auth(tenant.token), json=order)
    assert refused.status_code == 409 and refused.json()["title"] == "Quota exceeded"
    said = httpx.post(f"{api}/instances", json=order, headers={
        **auth(tenant.token), "Accept-Language": "zh-CN"}).json()["detail"]
    assert "GPU 配额" in said
    mine = httpx.get(f"{api}/gpu-quotas", headers=auth(tenant.token)).json()["items"]
    assert [(q["offer"], q["max_gpus"], q["held"]) for q in mine] == [
        ("h100-80g-x8@ningxia-1", 8, 8)]
    assert httpx.put(f"{api}/tenants/{tenant.tenant_id}/gpu-quotas/*", headers=auth(
        tenant.token), json={"max_gpus": 99}).status_code == 403
    assert httpx.put(f"{api}/tenants/{tenant.tenant_id}/gpu-quotas/*", headers=auth(
        operator.token), json={"max_gpus": -1}).status_code == 422
    shown = CliRunner().invoke(app, ["quotas", "--tenant", tenant.tenant_id], env=env)
    assert shown.exit_code == 0 and "scarce" in shown.output, shown.output
    gone = CliRunner().invoke(app, ["quota", "remove", tenant.tenant_id,
                                    "h100-80g-x8@ningxia-1"], env=env)
    assert gone.exit_code == 0, gone.output
    assert httpx.get(f"{api}/gpu-quotas", headers=auth(tenant.token)).json()["items"] == []
