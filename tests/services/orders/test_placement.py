"""Placement inside one order's transaction, on SQLite and PostgreSQL: the answer an order
gets is the instance as it is stored, and an order that finds every free node being
claimed by others waits to learn the outcome instead of refusing at once."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest

from gpulease.domain.errors import OutOfStock, PaymentRequired
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import counts, double_allocated_gpus

H100 = dict(sku="h100-80g-x8", region="ningxia-1")
CONTAINER = dict(kind="container", offer="rtx4090-24g-container", sku=None, region=None)


@pytest.mark.parametrize("fields", [
    H100,
    dict(H100, kind="cluster", nodes=2, term="day", name="pretrain"),
    dict(CONTAINER, gpus=3),
], ids=["bare_metal", "cluster", "container"])
def test_the_order_answer_is_the_stored_instance(
    fleet: Platform, tenant: TenantCtx, key: str, fields: dict[str, Any]
) -> None:
    if fields.get("kind") == "container":  # a busy host: the slice is not GPUs 0-2
        orders.place_order(fleet, tenant.principal, OrderRequest(ssh_keys=[key], **CONTAINER))
    answer, created = orders.place_order(fleet, tenant.principal,
                                         OrderRequest(ssh_keys=[key], **fields))
    assert created
    stored = instances.show_instance(fleet, tenant.principal, answer.id)
    assert answer.model_dump() == stored.model_dump()
    assert [st.stage for st in answer.stages] == ["ordered"]
    assert sum(len(n.gpus) for n in answer.nodes) == answer.gpu_count
    assert double_allocated_gpus(fleet) == []


def _hold_stalled(monkeypatch: pytest.MonkeyPatch, tenant_id: str) -> tuple[threading.Event,
                                                                               threading.Event]:
    """Stall `tenant_id`'s orders after their claim, before the wallet hold, until `go`."""
    claimed, go = threading.Event(), threading.Event()
    real = wallet.hold_first_period

    def stalled(s: Any, p: Platform, inst: Any, now: Any, extra: Decimal = Decimal(0)
                ) -> Decimal:
        if inst.tenant_id == tenant_id:
            claimed.set()
            assert go.wait(30)
        return real(s, p, inst, now, extra)

    monkeypatch.setattr(orders, "hold_first_period", stalled)
    return claimed, go


def _order_in_thread(p: Platform, t: TenantCtx, key: str) -> tuple[threading.Thread,
                                                                   list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(orders.place_order(p, t.principal, OrderRequest(ssh_keys=[key], **H100)))
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@pytest.mark.parametrize("first_pays", [False, True], ids=["first-rolls-back", "first-commits"])
def test_an_order_for_the_last_node_waits_for_the_claim_in_flight(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch,
    first_pays: bool,
) -> None:
    orders.place_order(fleet, tenant.principal, OrderRequest(ssh_keys=[key], **H100))
    first = new_tenant(fleet, funds="100000000" if first_pays else "0.01")
    claimed, go = _hold_stalled(monkeypatch, first.tenant_id)
    a, a_out = _order_in_thread(fleet, first, key)
    assert claimed.wait(30)  # the first order holds the last free node, not yet committed
    before = counts(fleet)
    b, b_out = _order_in_thread(fleet, tenant, key)
    b.join(0.5)
    assert b.is_alive()  # waiting on the first order's claim, not refused
    go.set()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    if first_pays:
        assert isinstance(a_out[0], tuple)
        assert isinstance(b_out[0], OutOfStock)
        assert "No free h100-80g-x8 node in ningxia-1" in b_out[0].detail
    else:
        assert isinstance(a_out[0], PaymentRequired)  # rolled back: the node is free again
        view, created = b_out[0]  # type: ignore[misc]
        assert created and view.nodes[0].status == "allocated"
    # One of the two holds the node (before counted only committed claims).
    assert counts(fleet)["allocated_nodes"] == before["allocated_nodes"] + 1
    assert double_allocated_gpus(fleet) == []
