"""A rented server's backup policy against the real S3 server: the tenant's schedule takes
a backup when it is due and not before; a lapsed lease is backed up as it enters grace and
once more before its erase, the last one tried again past the usual three attempts until
grace ends and the tenant told where the data went; the erase waits a while for a last
backup still under way, then goes on and says it failed; a tenant who opted out gets no
backup. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.money_tables import LeaseNotice
from gpulease.db.ops_tables import Backup
from gpulease.domain.errors import InvalidInput
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.schemas.fleet import BackupPolicyUpdate
from gpulease.services.instances import views as instances
from gpulease.services.money import leases
from gpulease.services.storage import backup_policy, backups
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.pipelines import backup_runs
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker
from tests.fixtures.storage import disk, hurry, with_storage


def runs(p: Platform, iid: str) -> list[tuple[str, str]]:
    with p.db.read() as s:
        return [(b.trigger, b.status) for b in s.scalars(
            select(Backup).where(Backup.instance_id == iid).order_by(Backup.requested_at))]


def notice_kinds(p: Platform, iid: str) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(LeaseNotice.kind).where(LeaseNotice.instance_id == iid)
                              .order_by(LeaseNotice.id)))


def test_the_tenants_schedule_backs_up_when_due_and_not_before(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me = tenant.principal
    node = instances.show_instance(fleet, me, iid).nodes[0].name
    (disk(fleet, node) / "work").mkdir(parents=True)
    (disk(fleet, node) / "work" / "weights.bin").write_bytes(b"w" * 4096)

    shown = backup_policy.show(fleet, me, iid)
    assert (shown.path, shown.every_hours, shown.at_lease_end) == (
        "/data/checkpoints", None, True)
    assert shown.last_success_at is None and shown.next_scheduled_at is None
    with pytest.raises(InvalidInput, match="data disk"):
        backup_policy.update(fleet, me, iid, BackupPolicyUpdate(path="/etc"))
    with pytest.raises(InvalidInput, match="once an hour"):
        backup_policy.update(fleet, me, iid, BackupPolicyUpdate(every_hours=0.25))
    assert backup_policy.run_schedules(fleet) == 0  # nothing asked

    set_ = backup_policy.update(fleet, me, iid, BackupPolicyUpdate(path="/data/work",
                                                                   every_hours=6))
    assert set_.every_hours == 6 and set_.next_scheduled_at == clock.at
    assert backup_policy.run_schedules(fleet) == 1
    assert backup_policy.run_schedules(fleet) == 0  # one at a time, and not due again
    drive(fleet, backup_runs.PIPELINE)
    done = backup_policy.show(fleet, me, iid)
    assert done.last_success_at == clock.at and done.last_snapshot_id
    assert done.next_scheduled_at == clock.at + timedelta(hours=6)
    clock.move(hours=5)
    assert backup_policy.run_schedules(fleet) == 0
    clock.move(hours=1)
    assert backup_policy.run_schedules(fleet) == 1
    drive(fleet, backup_runs.PIPELINE)
    assert runs(fleet, iid) == [("schedule", "succeeded")] * 2

    with LiveServer(fleet) as server:  # the CLI shows it and turns the schedule off
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        r = CliRunner().invoke(app, ["backup-policy", iid, "--every", "0"], env=env)
        assert r.exit_code == 0, r.output
        assert "schedule: none" in r.output and "last success" in r.output
        assert done.last_snapshot_id not in r.output  # the newer one is shown
    clock.move(hours=12)
    assert backup_policy.run_schedules(fleet) == 0


def test_a_lapsed_lease_is_backed_up_at_grace_and_before_the_erase(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    opted_out = deliver(fleet, tenant, worker, key)
    me = tenant.principal
    backup_policy.update(fleet, me, opted_out, BackupPolicyUpdate(at_lease_end=False))
    node = instances.show_instance(fleet, me, iid).nodes[0].name
    ckpt = disk(fleet, node) / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "step-1.pt").write_bytes(b"1" * 10_000)
    lease = leases.show_lease(fleet, me, iid)

    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert runs(fleet, iid) == [("lease_grace", "queued")]
    assert runs(fleet, opted_out) == []
    drive(fleet, backup_runs.PIPELINE)
    assert runs(fleet, iid) == [("lease_grace", "succeeded")]
    assert notice_kinds(fleet, iid) == ["expiry", "backup_saved"]

    (ckpt / "step-2.pt").write_bytes(b"2" * 10_000)  # work goes on during grace
    grace_until = leases.show_lease(fleet, me, iid).grace_until
    assert grace_until is not None
    clock.at = grace_until - timedelta(hours=7)
    lease_sweep.sweep_leases(fleet)
    assert len(runs(fleet, iid)) == 1  # not yet
    clock.at = grace_until - timedelta(hours=5)
    lease_sweep.sweep_leases(fleet)
    lease_sweep.sweep_leases(fleet)  # once
    assert runs(fleet, iid)[-1] == ("lease_final", "queued")
    assert len(runs(fleet, iid)) == 2
    assert fleet.drivers.fleet is not None
    fleet.drivers.fleet.inject_fault(node, "agent_transfer", "transient", times=4)
    final_id = backups.list_runs(fleet, me, iid).items[0].id
    for _ in range(4):  # past MAX_ATTEMPTS: the erase is hours away
        drive(fleet, backup_runs.PIPELINE)
        hurry(fleet, final_id)
    drive(fleet, backup_runs.PIPELINE)
    final = backups.show_run(fleet, me, iid, final_id)
    assert (final.status, final.attempts) == ("succeeded", 5), final.status_reason
    assert final.files == 2 and final.bytes_moved == 10_000  # only what was new

    clock.at = grace_until + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, me, iid).status == "ended"
    kinds = notice_kinds(fleet, iid)
    assert kinds.count("backup_saved") == 2 and kinds[-1] == "erased"
    assert "backup_failed" not in notice_kinds(fleet, opted_out)


def test_the_erase_waits_a_while_for_a_last_backup_then_says_it_failed(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me = tenant.principal
    lease = leases.show_lease(fleet, me, iid)
    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)  # grace: its backup queued, and this test never drives it
    grace_until = leases.show_lease(fleet, me, iid).grace_until
    assert grace_until is not None
    clock.at = grace_until + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, me, iid).status == "grace"  # waits
    assert runs(fleet, iid) == [("lease_grace", "queued")]  # the first is the last one
    clock.at = grace_until + backup_policy.ERASE_WAITS
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, me, iid).status == "ended"
    worker.run_until_idle()
    assert runs(fleet, iid) == [("lease_grace", "failed")]
    assert "backup_failed" in notice_kinds(fleet, iid)
