"""The backup-runs pipeline on the embedded S3: a run is claimed, started with a key minted
for it, carried out by the node's agent and finished, its claim let go; a run another
worker holds is left alone until that claim expires; a run whose server left the instance
fails saying so, without asking the store for a key; a worker that lost its run before
the transfer sends nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from gpulease.db.claims import Hold, claim, take
from gpulease.db.ops_tables import Backup
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.schemas.fleet import BackupRequest, BackupView
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.storage import backups
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import LeapingClock
from gpulease.testing.factories import deliver
from gpulease.worker.pipelines import backup_runs
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker
from tests.fixtures.storage import disk, iam_keys, with_storage


def _run(p: Platform, run_id: str) -> Backup:
    with p.db.read() as s:
        row = s.get(Backup, run_id)
    assert row is not None
    return row


def _a_backup_asked(fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
                    ) -> BackupView:
    """A delivered server with one checkpoint on its data disk, and a backup of it asked
    for (queued)."""
    iid = deliver(fleet, tenant, Worker(fleet), key)
    with_storage(fleet, s3)
    node = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    (disk(fleet, node) / "checkpoints").mkdir(parents=True)
    (disk(fleet, node) / "checkpoints" / "step-1.pt").write_bytes(b"w" * 4096)
    return backups.request(fleet, tenant.principal, iid, BackupRequest())


def test_a_run_is_claimed_carried_out_and_let_go(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    fleet.clock = clock = LeapingClock()
    run = _a_backup_asked(fleet, tenant, key, s3)
    held = claim(fleet.db, Backup, Hold("another-worker", clock.now(), timedelta(seconds=30)),
                 [Backup.id == run.id])
    assert [h.id for h in held] == [run.id]
    assert drive(fleet, backup_runs.PIPELINE, owner="me") == 0  # another worker has it
    clock.leap += timedelta(seconds=31)  # …and died
    for _ in range(20):  # bounded: started, then asked after until it is done
        drive(fleet, backup_runs.PIPELINE, owner="me")
        if _run(fleet, run.id).status != "queued" and _run(fleet, run.id).status != "running":
            break
    done = _run(fleet, run.id)
    assert done.status == "succeeded" and done.files == 1 and done.snapshot_id
    assert (done.lock_token, done.lock_owner, done.step_in_progress) == (None, None, None)
    assert done.key_id is None  # the run's key deleted once it ended


def test_a_run_whose_server_left_fails_saying_so(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    with_storage(fleet, s3)
    run = backups.request(fleet, tenant.principal, iid, BackupRequest())
    actions.release_instance(fleet, tenant.principal, iid)
    drive(fleet, backup_runs.PIPELINE)
    failed = _run(fleet, run.id)
    assert failed.status == "failed" and "left the instance" in (failed.status_reason or "")
    with fleet.db.read() as s:
        assert s.scalar(select(Backup.lock_token).where(Backup.id == run.id)) is None


def test_a_run_whose_worker_died_mid_transfer_starts_again_at_the_stores_address_now(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in agent transfers within the worker's call: a worker killed mid-call leaves
    the run `running` only as long as its lock lasts (not a fixed 10 minutes); the next
    worker starts it again with a fresh key and the object store's address as it is now
    (a restart moved it), and the dead start's key is deleted."""
    from gpulease.drivers import simulated
    from gpulease.ports.agent import BackupPayload

    fleet.clock = clock = LeapingClock()
    run = _a_backup_asked(fleet, tenant, key, s3)

    class Killed(BaseException):
        """The worker's process ends mid-call (SIGKILL): nothing after it runs."""

    def killed(*_: object) -> None:
        raise Killed
    with monkeypatch.context() as m:
        m.setattr(simulated, "_transfer", killed)
        m.setattr(backup_runs, "release", lambda _run: None)  # no `finally` after a kill
        with pytest.raises(Killed):
            drive(fleet, backup_runs.PIPELINE, owner="dead-worker")
    dead = _run(fleet, run.id)
    assert dead.status == "running" and dead.step_in_progress == "transfer"
    first_key = dead.key_id
    assert first_key is not None and dead.payload_enc is not None
    moved = BackupPayload.model_validate_json(fleet.box.open(dead.payload_enc))
    with fleet.db.write() as s:  # the store came back elsewhere: the old address is dead
        row = s.get(Backup, run.id)
        assert row is not None
        row.payload_enc = fleet.box.seal(moved.model_copy(
            update={"endpoint": "http://127.0.0.1:9"}).model_dump_json())

    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s + 1)  # its lock ran out
    assert dead.next_attempt_at is not None
    assert dead.next_attempt_at <= clock.now()  # due once the lock is gone
    for _ in range(5):
        drive(fleet, backup_runs.PIPELINE, owner="next-worker")
        if _run(fleet, run.id).status not in ("queued", "running"):
            break
    done = _run(fleet, run.id)
    assert done.status == "succeeded" and done.files == 1 and done.attempts == 2
    assert first_key not in iam_keys(s3, tenant.tenant_id)


def test_a_worker_that_lost_its_run_before_the_transfer_sends_nothing(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _a_backup_asked(fleet, tenant, key, s3)
    (held,) = claim(fleet.db, Backup, Hold("a", fleet.clock.now(), timedelta(seconds=30)),
                    [Backup.id == run.id])
    sent: list[str] = []
    started = backup_runs._start_or_check

    def then_frozen(*args: Any, **kwargs: Any) -> Any:
        out = started(*args, **kwargs)
        if out is not None:  # frozen here past its lock, and taken over
            with fleet.db.write() as s:
                row = s.get(Backup, run.id)
                assert row is not None
                take(row)
            agent = out[2]
            monkeypatch.setattr(type(agent), "transfer",
                                lambda *a, **k: sent.append(run.id))
        return out

    monkeypatch.setattr(backup_runs, "_start_or_check", then_frozen)
    backup_runs.step_run(fleet, held)
    assert sent == []  # the fence stopped it: the new holder carries the run
    assert _run(fleet, run.id).status == "running"
