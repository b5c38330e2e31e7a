"""Signing in to the console from a test's client, as a tenant or an operator, and an
order's form."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.testing.callers import TenantCtx


def operator_in(p: Platform, client: TestClient, name: str = "ops") -> None:
    _, token = accounts.create_operator(p, f"{name}@example.com", "Ops")
    users.change_password(p, accounts.authenticate(p, token.token), PASSWORD, None)
    client.cookies.clear()
    assert client.post("/console/login", data={"email": f"{name}@example.com",
                                               "password": PASSWORD},
                       follow_redirects=False).status_code == 303


PASSWORD = "correct horse battery staple"
SKU, REGION = "h100-80g-x8", "ningxia-1"


def signed_in(p: Platform, t: TenantCtx, client: TestClient, again: bool = False
              ) -> TestClient:
    if not again:
        users.change_password(p, t.principal, PASSWORD, None)
    email = users.list_users(p, t.principal).items[0].email
    done = client.post("/console/login", data={"email": email, "password": PASSWORD},
                       follow_redirects=False)
    assert done.status_code == 303
    return client


ORDER = {"kind": "bare_metal", "sku": SKU, "region": REGION, "term": "month", "nodes": "1",
         "bandwidth": "100", "support": "support-standard"}
