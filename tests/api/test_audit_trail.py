"""The audit trail: every state-changing request and console sign-in is a row (who, from
where, what, on what, how it ended, request id); reads are not; tenant admins see their
own tenant's rows; the chain finds a changed or removed row. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.tables import AuditEntry
from gpulease.platform import Platform
from gpulease.services.accounts import users
from gpulease.services.platform import audit
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.servers import LiveServer


def rows(p: Platform) -> list[AuditEntry]:
    audit.drain(p)  # what the requests handed the writer thread is written
    with p.db.read() as s:
        return list(s.scalars(select(AuditEntry).order_by(AuditEntry.seq)))


def test_changes_and_sign_ins_are_recorded_with_who_where_and_how(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    me = {"Authorization": f"Bearer {tenant.token}"}
    httpx.get(f"{server.url}/api/v1/catalog", headers=me)  # a read: not recorded
    made = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "ci", "expires_in_days": 5},
                      headers=me | {"X-Request-Id": "req-42"})
    assert made.status_code == 201
    refused = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "x"},
                         headers={"Authorization": "Bearer glp_not-a-real-token"})
    assert refused.status_code == 401
    revoked = httpx.delete(f"{server.url}/api/v1/tokens/{made.json()['id']}", headers=me)
    assert revoked.status_code == 200
    topped = httpx.post(f"{server.url}/api/v1/tenants/{tenant.tenant_id}/top-ups",
                        json={"amount": "10", "reference": "wire 1"},
                        headers={"Authorization": f"Bearer {operator.token}"})
    assert topped.status_code == 201
    users.change_password(platform, tenant.principal, "a console passphrase", None)
    email = users.list_users(platform, tenant.principal).items[0].email
    login = f"{server.url}/console/login"
    httpx.post(login, data={"email": email, "password": "wrong, very wrong"})
    httpx.post(login, data={"email": email, "password": "a console passphrase"})

    got = [(r.action, r.outcome, r.user_id, r.role, r.tenant_id, r.target) for r in
           rows(platform)]
    me_id, tok = tenant.principal.user_id, made.json()["id"]
    top_up = got[3][5]
    assert top_up is not None and "asked.amount=10" in top_up  # what the change asked
    assert got == [
        ("POST /api/v1/tokens", 201, me_id, "admin", tenant.tenant_id,
         f"answer.id={tok} answer.user_id={me_id}"),  # ... and what it made
        ("POST /api/v1/tokens", 401, None, None, None, None),
        ("DELETE /api/v1/tokens/{token_id}", 200, me_id, "admin", tenant.tenant_id,
         f"token_id={tok} answer.user_id={me_id}"),
        ("POST /api/v1/tenants/{tenant_id}/top-ups", 201, operator.principal.user_id,
         "operator", tenant.tenant_id, top_up),
        ("POST /console/login", 401, None, None, None, f"email={email}"),
        ("POST /console/login", 303, me_id, "admin", tenant.tenant_id, f"email={email}"),
    ]
    first = rows(platform)[0]
    assert first.request_id == "req-42" and first.source == "127.0.0.1"
    assert first.token_id == tenant.principal.token_id

    # tenant admins read their own tenant's rows; another tenant's admin sees none of them
    own = httpx.get(f"{server.url}/api/v1/audit", headers=me).json()
    assert own["total"] == 4 and {i["tenant_id"] for i in own["items"]} == {tenant.tenant_id}
    stranger = new_tenant(platform)
    theirs = httpx.get(f"{server.url}/api/v1/audit",
                       headers={"Authorization": f"Bearer {stranger.token}"}).json()
    assert theirs["total"] == 0
    cli = CliRunner().invoke(app, ["audit", "--json"], env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token})
    assert cli.exit_code == 0 and '"total": 6' in cli.output


def test_the_chain_finds_a_changed_or_removed_row(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    me = {"Authorization": f"Bearer {tenant.token}"}
    for n in range(4):
        httpx.post(f"{server.url}/api/v1/tokens", json={"name": f"t{n}", "expires_in_days": 1},
                   headers=me)
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
    runner = CliRunner()
    intact = runner.invoke(app, ["audit", "verify"], env=env)
    assert intact.exit_code == 0 and "intact: rows 1–4 (4 checked)" in intact.output

    with platform.db.write() as s:  # someone with database access edits a row
        s.execute(update(AuditEntry).where(AuditEntry.seq == 2).values(outcome=403))
    broken = runner.invoke(app, ["audit", "verify"], env=env)
    assert broken.exit_code == 1 and "row 2 was changed" in broken.output
    with platform.db.write() as s:
        s.execute(update(AuditEntry).where(AuditEntry.seq == 2).values(outcome=201))
        s.execute(delete(AuditEntry).where(AuditEntry.seq == 3))  # ... or removes one
    assert "row 3 is missing" in str(audit.verify(platform, operator.principal).problem)
    with platform.db.write() as s:
        s.execute(delete(AuditEntry).where(AuditEntry.seq >= 3))  # ... or the newest ones
    assert "rows removed at the end" in str(audit.verify(platform, operator.principal).problem)


def test_retention_prunes_the_start_and_the_rest_still_verifies(
    platform: Platform, tenant: TenantCtx, operator: TenantCtx
) -> None:
    now = platform.clock.now()
    for days_ago in (500, 450, 10, 1):
        audit.record(platform, audit.Happening(at=now - timedelta(days=days_ago),
                                               action="POST /x", outcome=200))
    assert audit.prune(platform) == 2  # older than 400 days
    # rows 3-4, and the row that says what was pruned
    verdict = audit.verify(platform, operator.principal)
    assert verdict.intact and (verdict.first_seq, verdict.last_seq) == (3, 5)


def test_concurrent_rows_keep_the_chain_whole(platform: Platform,
                                              operator: TenantCtx) -> None:
    """Sixteen requests recording at once: each returns only once its row is committed,
    and the chain has no gap and verifies."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime

    def one(n: int) -> int:
        audit.record(platform, audit.Happening(
            at=datetime.now(UTC), action=f"POST /bench/{n}", outcome=201))
        with platform.db.read() as s:  # committed before record() returned
            return len(list(s.scalars(select(AuditEntry.seq).where(
                AuditEntry.action == f"POST /bench/{n}"))))

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(one, range(16))) == [1] * 16
    with platform.db.read() as s:
        seqs = sorted(s.scalars(select(AuditEntry.seq)))
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    verdict = audit.verify(platform, operator.principal)
    assert verdict.intact and verdict.checked == len(seqs)


def test_the_writer_answers_first_keeps_order_through_a_refusing_database(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batch mode (the default): the answer does not wait for the row; a database that
    refuses the writer twice delays the rows, in order, and loses none; a reader waits."""
    real, refusals = audit.append, [2]

    def flaky(p: Platform, happenings: list[audit.Happening]) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        real(p, happenings)

    monkeypatch.setattr(audit, "append", flaky)
    me = {"Authorization": f"Bearer {tenant.token}"}
    for n in range(5):
        assert httpx.post(f"{server.url}/api/v1/tokens", headers=me, json={
            "name": f"t{n}", "expires_in_days": 1}).status_code == 201
    assert refusals == [0]
    got = [r.action for r in rows(platform)]
    assert got == ["POST /api/v1/tokens"] * 5
    assert audit.verify(platform, operator.principal).intact
    queue = platform.kept.get(audit.QUEUE)
    assert queue is not None
    queue.close()  # a stopping process writes what is queued first
    httpx.post(f"{server.url}/api/v1/tokens", headers=me, json={"name": "after",
                                                                "expires_in_days": 1})
    assert len(rows(platform)) == 6  # a later row starts the writer again


def test_sync_mode_commits_the_row_before_the_answer(
    platform: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    platform.settings.audit_write = "sync"
    made = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "ci",
                                                           "expires_in_days": 1},
                      headers={"Authorization": f"Bearer {tenant.token}"})
    assert made.status_code == 201
    with platform.db.read() as s:  # no drain: it was committed before the answer left
        assert s.scalar(select(AuditEntry.action)) == "POST /api/v1/tokens"
    assert platform.kept.get(audit.QUEUE) is None
