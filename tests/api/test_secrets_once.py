"""A secret is shown once: a replayed creation answers without it, the idempotency store
keeps none, and the data directory is its owner's alone. SQLite and PostgreSQL."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
from sqlalchemy import select

from gpulease.db.tables import IdempotencyKey
from gpulease.platform import Platform
from gpulease.server import prepare
from gpulease.services.accounts import identity as accounts
from gpulease.testing.callers import TenantCtx
from gpulease.testing.platforms import make_settings
from gpulease.testing.servers import LiveServer


def stored_answers(p: Platform) -> list[str]:
    with p.db.read() as s:
        return [p.box.open(row.response_json) for row in s.scalars(select(IdempotencyKey))]


def test_a_replayed_token_creation_answers_without_the_token(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    headers = {"Authorization": f"Bearer {tenant.token}", "Idempotency-Key": "tok-1"}
    first = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "ci"}, headers=headers)
    again = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "ci"}, headers=headers)
    assert first.status_code == again.status_code == 201
    secret = first.json()["token"]
    assert secret.startswith("glp_") and again.json()["token"] is None
    assert again.json()["id"] == first.json()["id"]  # the same token, not a second one
    assert again.headers["idempotent-replayed"] == "true"
    assert accounts.authenticate(platform, secret).user_id == tenant.principal.user_id

    body = {"name": "acme", "admin_email": "boss@acme.example", "admin_name": "Boss"}
    ops = {"Authorization": f"Bearer {operator.token}", "Idempotency-Key": "ten-1"}
    made = httpx.post(f"{server.url}/api/v1/tenants", json=body, headers=ops)
    replayed = httpx.post(f"{server.url}/api/v1/tenants", json=body, headers=ops)
    assert made.json()["token"]["token"].startswith("glp_")
    assert replayed.json()["token"]["token"] is None
    assert replayed.json()["tenant"]["id"] == made.json()["tenant"]["id"]
    kept = stored_answers(platform)
    assert len(kept) == 2 and not [a for a in kept if secret in a
                                   or made.json()["token"]["token"] in a]  # no secret kept


def test_the_data_directory_is_its_owners_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    platform = prepare(make_settings("", data, secret_key=""))  # SQLite and a key file
    try:
        accounts.create_operator(platform, "root@example.com", "Root")
    finally:
        platform.db.dispose()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    files = [f for f in data.rglob("*") if f.is_file()]
    assert {f.name for f in files} >= {"gpulease.db"}
    loose = {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in files
             if stat.S_IMODE(f.stat().st_mode) & 0o077}
    assert loose == {}
