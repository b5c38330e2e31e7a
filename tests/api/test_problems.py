"""The API when its database connection is lost mid-request: 503 with Retry-After, and
nothing of the request written. SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import uuid
from decimal import Decimal
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gpulease.platform import Platform
from gpulease.services.money import wallet
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import counts
from gpulease.testing.platforms import PG_URL
from gpulease.testing.servers import LiveServer


def cut_connection(s: Session) -> None:
    """The server ends this session (PostgreSQL) or the driver fails (SQLite)."""
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        pid = conn.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return
    raise OperationalError("COMMIT", None, sqlite3.OperationalError("database is locked"))


def test_an_order_whose_connection_drops_answers_503_and_writes_nothing(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hold = orders.hold_first_period

    def hold_on_a_dead_connection(s: Session, *args: Any) -> Decimal:
        cut_connection(s)  # the nodes are claimed, the instance inserted: then the cut
        return hold(s, *args)

    monkeypatch.setattr(orders, "hold_first_period", hold_on_a_dead_connection)
    before = counts(fleet)
    balance = wallet.show_wallet(fleet, tenant.principal).balance
    body = {"kind": "bare_metal", "sku": "h100-80g-x8", "region": "ningxia-1",
            "ssh_keys": [key]}
    headers = {"Authorization": f"Bearer {tenant.token}", "Idempotency-Key": str(uuid.uuid4())}
    resp = httpx.post(f"{server.url}/api/v1/instances", json=body, headers=headers, timeout=30)
    assert resp.status_code == 503, resp.text
    assert resp.headers["retry-after"] == "5"
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert "nothing of it was written" in resp.json()["detail"]
    assert counts(fleet) == before  # no instance, allocation, event or idempotency record
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance

    monkeypatch.setattr(orders, "hold_first_period", hold)  # the database is back
    again = httpx.post(f"{server.url}/api/v1/instances", json=body, headers=headers,
                       timeout=30)
    assert again.status_code == 201, again.text
    assert counts(fleet)["instances"] == before["instances"] + 1
