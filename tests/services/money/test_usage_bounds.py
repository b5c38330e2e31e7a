"""Metering from outside the control plane: a `meter` token may post usage and nothing
else, and a record beyond what its instance could physically use (uplink × time, disk ×
time, GPUs × time; on its own or with what was charged before) is held for an operator,
not charged. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.domain.errors import Conflict, Forbidden
from gpulease.platform import Platform
from gpulease.schemas.money import UsageIn
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.instances import actions
from gpulease.services.money import metering, wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container, deliver
from gpulease.worker.runner import Worker

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


@pytest.fixture
def clock(fleet: Platform) -> MovableClock:
    c = MovableClock(T0)
    fleet.clock = c
    return c


def _usage(iid: str, key: str, kind: str, qty: str, start: datetime, hours: float = 1
           ) -> UsageIn:
    return UsageIn(key=key, instance_id=iid, kind=kind,  # type: ignore[arg-type]
                   quantity=Decimal(qty), started_at=start,
                   ended_at=start + timedelta(hours=hours))


def _balance(p: Platform, t: TenantCtx) -> Decimal:
    return wallet.show_wallet(p, t.principal).balance


def test_a_meter_token_reports_usage_and_nothing_else(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    clock.move(hours=2)
    meter = accounts.create_meter(fleet, operator.principal, "netflow-ningxia-1", 30)
    with pytest.raises(Forbidden):  # only an operator makes one
        accounts.create_meter(fleet, tenant.principal, "mine")
    with pytest.raises(Conflict, match="exists already"):
        accounts.create_meter(fleet, operator.principal, "NetFlow-Ningxia-1")
    bearer = {"Authorization": f"Bearer {meter.token.secret()}"}
    body = {"records": [{"key": "eg-1", "instance_id": iid, "kind": "egress_gb",
                         "quantity": "120", "started_at": T0.isoformat(),
                         "ended_at": (T0 + timedelta(hours=1)).isoformat()}]}
    with TestClient(create_app(fleet)) as client:
        r = client.post("/api/v1/usage", json=body, headers=bearer)
        assert r.status_code == 200, r.text
        assert r.json()[0]["status"] == "charged" and r.json()[0]["amount"] == "60.00"
        # Everything else refuses the meter's token, whatever the route would check itself.
        for method, path in (("GET", "/api/v1/catalog"), ("GET", "/api/v1/instances"),
                             ("GET", f"/api/v1/instances/{iid}"), ("GET", "/api/v1/me"),
                             ("GET", "/api/v1/usage"), ("GET", "/api/v1/usage/held"),
                             ("POST", "/api/v1/tokens"), ("GET", "/api/v1/nodes")):
            r = client.request(method, path, headers=bearer, json={"name": "x"})
            assert r.status_code == 403, (path, r.text)
            assert "only reports usage" in r.json()["detail"]
        for token, answer in ((tenant.token, 200), (meter.token.secret(), 303)):
            client.cookies.set("gpulease_session", token)
            assert client.get("/console/", follow_redirects=False).status_code == answer
        client.cookies.clear()  # a meter's token is no console session
        # The operator ends the meter like any user: its token stops at once.
        users.disable_user(fleet, operator.principal, meter.meter.id)
        body["records"][0]["key"] = "eg-2"
        assert client.post("/api/v1/usage", json=body, headers=bearer).status_code == 401


def test_usage_beyond_what_the_instance_could_use_is_held_not_charged(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    bm = deliver(fleet, tenant, worker, key)  # H100 node: 25 Gbit/s uplink, 2 × 7.6 TB
    ct = container(fleet, tenant, worker, key, gpus=2)  # 2 of 8 GPUs of a 2 × 3.84 TB host
    clock.move(hours=25)
    meter = accounts.authenticate(fleet, accounts.create_meter(
        fleet, operator.principal, "collector").token.secret())
    before = _balance(fleet, tenant)
    out = metering.report_usage(fleet, meter, [
        # the forged figure of the issue: 999,999,999,999 GB in one minute
        _usage(bm, "forged", "egress_gb", "999999999999", T0, hours=1 / 60),
        _usage(bm, "real", "egress_gb", "10000", T0),  # 11,250 GB an hour is the most
        _usage(bm, "again", "egress_gb", "10000", T0),  # the same hour under a new key
        _usage(ct, "disk-ok", "storage_gb_days", "1000", T0, hours=24),
        _usage(ct, "disk-big", "storage_gb_days", "5000", T0, hours=24),  # 1,920 GB there
        _usage(ct, "gpu-big", "gpu_hours", "3", T0),  # 2 GPUs for one hour
    ])
    status = {u.key: (u.status, u.held_reason or "") for u in out}
    assert [k for k, (s, _) in status.items() if s == "charged"] == ["real", "disk-ok"]
    assert "more than 1 × 25 Gbit/s uplink allow (187.5 at most)" in status["forged"][1]
    assert "with the 10000 GB charged before" in status["again"][1]
    assert "more than 1920 GB of disk allow" in status["disk-big"][1]
    assert "more than 2 GPUs allow" in status["gpu-big"][1]
    charged = sum((u.amount for u in out if u.status == "charged"), Decimal(0))
    assert _balance(fleet, tenant) == before - charged
    # The tenant sees held records as such; nothing of them is in the ledger.
    mine = metering.list_usage(fleet, tenant.principal, bm).items
    assert {u.key: u.status for u in mine}["forged"] == "held"

    # After the release: usage that starts later than the grace is held too.
    actions.release_instance(fleet, tenant.principal, bm)
    worker.run_until_idle()
    clock.move(hours=5)
    late = metering.report_usage(fleet, meter, [
        _usage(bm, "late", "egress_gb", "1", clock.now() - timedelta(hours=2))])
    assert late[0].status == "held" and "was released" in (late[0].held_reason or "")

    # The operator reviews: all five wait, oldest first; one charged, the rest rejected.
    held = metering.held_usage(fleet, operator.principal)
    assert [u.key for u in held.items] == ["forged", "again", "disk-big", "gpu-big", "late"]
    with pytest.raises(Forbidden):
        metering.decide_usage(fleet, tenant.principal, held.items[0].id, charge=True)
    balance = _balance(fleet, tenant)
    gpu = metering.decide_usage(fleet, operator.principal, held.items[3].id, charge=True)
    assert gpu.status == "charged" and _balance(fleet, tenant) == balance - gpu.amount
    for u in held.items[:3] + held.items[4:]:
        assert metering.decide_usage(fleet, operator.principal, u.id, charge=False
                                     ).status == "rejected"
    with pytest.raises(Conflict, match="rejected already"):
        metering.decide_usage(fleet, operator.principal, held.items[0].id, charge=True)
    assert metering.held_usage(fleet, operator.principal).total == 0
    assert _balance(fleet, tenant) == balance - gpu.amount
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)
