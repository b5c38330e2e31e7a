"""The audit writer never stops (issue: one anonymous request stopped the trail on
PostgreSQL): hostile fields are cleaned and cut before they are chained, a row the database
refuses is written reduced, an outage is waited out in order, a stopping process gives up
within its bound. The head is sealed: rows cut at either end show. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.exc import DataError, OperationalError

from gpulease import process_metrics
from gpulease.db.tables import AuditEntry, AuditHead, PlatformFact
from gpulease.platform import Platform
from gpulease.services.platform import audit, audit_writer
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer


def rows(p: Platform) -> list[AuditEntry]:
    audit.drain(p)
    with p.db.read() as s:
        return list(s.scalars(select(AuditEntry).order_by(AuditEntry.seq)))


def test_hostile_paths_and_sign_ins_are_recorded_and_rows_behind_them_too(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    anonymous_long = httpx.post(f"{server.url}/api/v1/tenants/{'t' * 40}/top-ups",
                                json={"amount": "1", "reference": "x"})
    assert anonymous_long.status_code == 401
    as_operator = {"Authorization": f"Bearer {operator.token}"}
    nul = httpx.post(f"{server.url}/api/v1/tenants/ab%00cd/top-ups", headers=as_operator,
                     json={"amount": "1", "reference": "x"})
    assert nul.status_code in (404, 422)
    login = httpx.post(f"{server.url}/console/login",
                       data={"email": "a\x00\x1b]0;owned\x07@example.com", "password": "x"})
    assert login.status_code == 401
    after = httpx.post(f"{server.url}/api/v1/tokens", json={"name": "after",
                                                            "expires_in_days": 1},
                       headers={"Authorization": f"Bearer {tenant.token}"})
    assert after.status_code == 201

    got = rows(platform)
    assert [r.action for r in got] == ["POST /api/v1/tenants/{tenant_id}/top-ups"] * 2 + [
        "POST /console/login", "POST /api/v1/tokens"]
    assert got[0].tenant_id == "t" * 32  # cut to the column, not refused
    assert got[1].target == "tenant_id=ab\\x00cd asked.amount=1 asked.reference=x"  # escaped
    assert got[2].target == "email=a\\x00\\x1b]0;owned\\x07@example.com"
    assert all("reduced" not in (r.target or "") for r in got)
    verdict = audit.verify(platform, operator.principal)
    assert verdict.intact and verdict.checked == 4


def test_a_row_the_database_refuses_is_written_reduced_and_nothing_waits_behind_it(
    platform: Platform, operator: TenantCtx, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = audit.append

    def picky(p: Platform, happenings: list[audit.Happening]) -> None:
        if any(h.target == "poison" for h in happenings):
            raise DataError("INSERT", {}, Exception("invalid byte sequence"))
        real(p, happenings)

    monkeypatch.setattr(audit, "append", picky)
    queue = audit_writer.writer(platform)
    before = process_metrics.AUDIT_ROWS_REDUCED._value.get()
    now = datetime.now(UTC)
    for n, target in enumerate([None, "poison", None]):
        queue.submit(audit.Happening(at=now + timedelta(microseconds=n), action=f"POST /{n}",
                                     outcome=201, user_id="u1", target=target))
    assert queue.flush(10)
    got = [(r.action, r.outcome, r.user_id, r.target) for r in rows(platform)]
    assert got == [
        ("POST /0", 201, "u1", None),
        ("POST /1", 0, None, "row reduced: the database refused it (DataError)"),
        ("POST /2", 201, "u1", None),
    ]
    assert process_metrics.AUDIT_ROWS_REDUCED._value.get() == before + 1
    assert audit.verify(platform, operator.principal).intact


def test_an_outage_is_waited_out_and_a_stopping_process_gives_up_within_its_bound(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(p: Platform, happenings: list[audit.Happening]) -> None:
        raise OperationalError("INSERT", {}, Exception("connection refused"))

    monkeypatch.setattr(audit, "append", down)
    queue = audit_writer.AuditWriter(platform)
    queue.submit(audit.Happening(at=datetime.now(UTC), action="POST /x", outcome=200))
    assert not queue.flush(0.5)  # still waiting, in order, not dropped
    depth, age = queue.depth_and_age()
    assert depth == 1 and age >= 0.4
    assert process_metrics.REGISTRY.get_sample_value("gpulease_audit_queue_depth") == 1.0
    lost = process_metrics.AUDIT_ROWS_LOST._value.get()
    started = time.monotonic()
    queue.close(timeout_s=1.0)
    assert time.monotonic() - started < 8.0
    assert process_metrics.AUDIT_ROWS_LOST._value.get() == lost + 1
    assert queue.depth_and_age() == (0, 0.0)


def _delete_and_move_head(p: Platform, *, last: bool) -> None:
    with p.db.write() as s:
        head = s.get(AuditHead, audit.HEAD)
        assert head is not None
        if last:  # remove the newest two rows and move the head back over them
            s.execute(delete(AuditEntry).where(AuditEntry.seq > head.last_seq - 2))
            new_last = s.scalar(select(AuditEntry).where(AuditEntry.seq == head.last_seq - 2))
            assert new_last is not None
            head.last_seq, head.last_mac = new_last.seq, new_last.mac
        else:  # remove the oldest two rows and set the pruned mark past them
            gone = s.scalar(select(AuditEntry).where(AuditEntry.seq == 2))
            assert gone is not None
            s.execute(delete(AuditEntry).where(AuditEntry.seq <= 2))
            head.pruned_through, head.pruned_mac = 2, gone.mac


@pytest.mark.parametrize("end", ["last", "first"])
def test_cuts_at_either_end_are_reported_and_stay_reported(
    platform: Platform, operator: TenantCtx, end: str
) -> None:
    now = datetime.now(UTC)
    for n in range(5):
        audit.record(platform, audit.Happening(at=now, action=f"POST /r{n}", outcome=201))
    assert audit.verify(platform, operator.principal).intact
    _delete_and_move_head(platform, last=end == "last")
    verdict = audit.verify(platform, operator.principal)
    assert not verdict.intact and "head was altered" in str(verdict.problem)

    # the next writer finds the seal broken under the installation's key: it writes a row
    # that says so, so resealing the head does not hide the cut
    audit.record(platform, audit.Happening(at=now, action="POST /later", outcome=201))
    actions = [r.action for r in rows(platform)]
    assert actions[-2:] == [audit.CUT, "POST /later"]
    verdict = audit.verify(platform, operator.principal)
    assert not verdict.intact and "found the chain's head altered" in str(verdict.problem)


def test_a_removed_seal_is_reported(platform: Platform, operator: TenantCtx) -> None:
    audit.record(platform, audit.Happening(at=datetime.now(UTC), action="POST /a",
                                           outcome=201))
    with platform.db.write() as s:
        s.execute(update(AuditHead).values(seal=""))
    verdict = audit.verify(platform, operator.principal)
    assert not verdict.intact and "not sealed" in str(verdict.problem)
    audit.seal(platform)  # a restarting process does not reseal it silently
    assert rows(platform)[-1].action == audit.CUT


def test_pruning_leaves_a_sealed_record_of_what_it_removed(
    platform: Platform, operator: TenantCtx
) -> None:
    now = platform.clock.now()
    for days_ago in (500, 450, 10):
        audit.record(platform, audit.Happening(at=now - timedelta(days=days_ago),
                                               action="POST /x", outcome=200))
    assert audit.prune(platform) == 2
    last = rows(platform)[-1]
    assert last.action == audit.PRUNED and last.target is not None
    assert last.target.startswith("rows 1-2 removed (2), older than 400 days")
    verdict = audit.verify(platform, operator.principal)
    assert verdict.intact and (verdict.first_seq, verdict.last_seq) == (3, 4)


def test_a_process_with_a_key_that_is_not_the_installations_writes_nothing(
    platform: Platform
) -> None:
    audit.record(platform, audit.Happening(at=datetime.now(UTC), action="POST /a",
                                           outcome=201))
    with platform.db.write() as s:  # a rotation elsewhere: new fingerprint, new seal
        fact = s.get(PlatformFact, audit.FINGERPRINT)
        if fact is None:
            s.add(PlatformFact(name=audit.FINGERPRINT, value="another-key"))
        else:
            fact.value = "another-key"
        s.execute(update(AuditHead).values(seal="0" * 64))
    with pytest.raises(audit.KeyNotInstallations):
        audit.record(platform, audit.Happening(at=datetime.now(UTC), action="POST /b",
                                               outcome=201))
    assert [r.action for r in rows(platform)] == ["POST /a"]
