"""The secret key: the database keeps its fingerprint and a process with another key is
refused, saying so; a shared database needs the key given; rotation re-seals every secret
and re-keys the audit chain, which verifies intact under the new key. SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from gpulease.compose import make_platform
from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.services.platform import audit, keys
from gpulease.testing.platforms import make_settings


def twin(p: Platform, key: str, tmp_path: Path) -> Platform:
    """Another process on the same database with `key`."""
    return make_platform(make_settings(p.settings.database_url, tmp_path / "twin",
                                                secret_key=key))


def test_a_process_with_another_key_is_refused_and_rotation_rekeys_everything(
    fleet: Platform, tmp_path: Path,
) -> None:
    keys.check_key(fleet)  # the first process records the fingerprint
    keys.check_key(fleet)  # and is itself accepted again
    audit.append(fleet, [audit.Happening(at=datetime(2026, 12, 1, tzinfo=UTC),
                                         action=f"POST /api/v1/x{i}", outcome=200)
                         for i in range(5)])
    with fleet.db.read() as s:
        node_id, sealed = s.execute(select(Node.id, Node.bmc_password_enc).limit(1)).one()
    password = fleet.box.open(sealed)

    stranger = twin(fleet, Fernet.generate_key().decode(), tmp_path)
    with pytest.raises(keys.KeyMismatch, match="fingerprint"):
        keys.check_key(stranger)
    stranger.db.dispose()

    new_key = Fernet.generate_key().decode()
    counts = keys.rotate(fleet, new_key)
    assert counts["nodes"] >= 1 and counts["audit_entries"] >= 5
    rotated = twin(fleet, new_key, tmp_path)
    try:
        keys.check_key(rotated)  # the new key is the installation's now
        with rotated.db.read() as s:
            resealed = s.scalar(select(Node.bmc_password_enc).where(Node.id == node_id))
        assert rotated.box.open(str(resealed)) == password
        assert audit.verify(rotated, keys.SYSTEM).intact
        with pytest.raises(keys.KeyMismatch):
            keys.check_key(fleet)  # the old key is refused from now on
    finally:
        rotated.db.dispose()


def test_rotation_refuses_a_broken_audit_chain_and_the_same_key(platform: Platform) -> None:
    from gpulease.db.tables import AuditEntry
    from gpulease.domain.errors import Conflict

    audit.append(platform, [audit.Happening(at=datetime(2026, 12, 1, tzinfo=UTC),
                                            action="POST /api/v1/y", outcome=200)])
    with pytest.raises(Conflict, match="current key"):
        keys.rotate(platform, platform.settings.secret_key)
    with platform.db.write() as s:
        row = s.scalars(select(AuditEntry)).first()
        assert row is not None
        row.outcome = 500  # tampered
    with pytest.raises(Conflict, match="audit chain is broken"):
        keys.rotate(platform, Fernet.generate_key().decode())


def test_a_shared_database_needs_the_key_given() -> None:
    with pytest.raises(keys.KeyMissing, match="GPULEASE_SECRET_KEY"):
        keys.require_shared_key("postgresql+psycopg://db.internal/gpulease", "")
    keys.require_shared_key("sqlite:///x.db", "")  # one host: a key file is fine


@pytest.mark.parametrize("same_key", [True, False])
def test_two_processes_recording_the_key_at_once(platform: Platform, tmp_path: Path,
                                                 same_key: bool) -> None:
    """Two processes start at once on a new database: while one has recorded its key's
    fingerprint but not yet committed, the other checks its own. It waits, then is accepted
    (same key) or refused saying why (another key); never a unique-key failure."""
    import threading

    from gpulease.db.tables import PlatformFact

    other = platform.box.fingerprint() if same_key else "0123456789abcdef"
    outcome: list[BaseException | None] = []

    def second_process() -> None:
        try:
            keys.check_key(platform)
            outcome.append(None)
        except BaseException as failure:
            outcome.append(failure)

    with platform.db.write() as s:
        s.add(PlatformFact(name=keys.FINGERPRINT, value=other))
        s.flush()  # the first process's row, written and not yet committed
        checking = threading.Thread(target=second_process)
        checking.start()
        checking.join(timeout=0.5)  # the second process is now waiting on the first
    checking.join(timeout=30)
    assert not checking.is_alive() and len(outcome) == 1
    if same_key:
        assert outcome[0] is None
    else:
        assert isinstance(outcome[0], keys.KeyMismatch), outcome[0]
        assert "fingerprint 0123456789abcdef" in str(outcome[0])
    with platform.db.read() as s:
        facts = s.scalars(select(PlatformFact).where(PlatformFact.name == keys.FINGERPRINT))
        assert [f.value for f in facts] == [other]


def test_rotation_refuses_while_workers_run_and_names_them(platform: Platform) -> None:
    """A worker left running with the old key would seal what the new key cannot open."""
    from gpulease.domain.errors import Conflict
    from gpulease.services.platform import workers

    workers.register(platform, "worker-a", 2)
    with pytest.raises(Conflict, match=r"worker-a \(.*pid \d+\)"):
        keys.rotate(platform, Fernet.generate_key().decode())
    workers.stopped(platform, "worker-a")
    keys.rotate(platform, Fernet.generate_key().decode())  # all stopped: it runs
