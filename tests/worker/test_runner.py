"""The worker: a step drives at most one row of each pipeline; `run_until_idle` works until
no row has work left (running the due periodic jobs between steps) or says it is still
busy; started, it registers itself and runs its pipelines, heartbeat and scheduler on
threads of their own, and stopping marks it stopped."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from gpulease.db.tables import WorkerProcess
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_name_of, place, sim
from gpulease.worker.runner import PIPELINES, Worker


def test_a_step_drives_at_most_one_row_of_each_pipeline(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    worker = Worker(fleet, owner="one-step")
    assert worker.step() is False and not worker.has_work()
    first, second = place(fleet, tenant, key), place(fleet, tenant, key)
    assert worker.step() is True
    statuses = {iid: instances.show_instance(fleet, tenant.principal, iid).status
                for iid in (first, second)}
    assert sorted(statuses.values()) == ["deploying", "pending"]  # one instance a step
    assert worker.has_work()
    assert {p.name for p in PIPELINES} == {"nodes", "instances", "backups", "image-saves",
                                           "power-actions"}


def test_run_until_idle_delivers_or_says_it_is_still_busy(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    worker = Worker(fleet, owner="until-idle")
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
    stuck = place(fleet, tenant, key)
    sim(fleet).inject_fault(node_name_of(fleet, tenant, stuck), "agent_up", "hang", times=10**6)
    with pytest.raises(TimeoutError, match="still busy"):
        worker.run_until_idle(timeout_s=0.5)


def test_a_started_worker_registers_runs_and_stops(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    worker = Worker(fleet, owner="threads")
    worker.start(threads=2)
    try:
        iid = place(fleet, tenant, key)
        fleet.wake()
        for _ in range(600):  # bounded: 30 s
            if instances.show_instance(fleet, tenant.principal, iid).status == "ready":
                break
            time.sleep(0.05)
        assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
        with fleet.db.read() as s:
            row = s.scalar(select(WorkerProcess).where(WorkerProcess.owner == "threads"))
            assert row is not None and row.threads == 2 and row.stopped_at is None
    finally:
        worker.stop()
    with fleet.db.read() as s:
        row = s.scalar(select(WorkerProcess).where(WorkerProcess.owner == "threads"))
        assert row is not None and row.stopped_at is not None


def test_a_worker_whose_clock_is_off_from_the_databases_claims_nothing(
    fleet: Platform, tenant: TenantCtx, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock expiry and stage deadlines are compared across hosts: a host whose clock jumped
    a minute ahead would take over live workers' rows. It says so and stops claiming until
    its clock agrees with the database's again (PostgreSQL; SQLite has one clock)."""
    if fleet.db.dialect != "postgresql":
        pytest.skip("SQLite: one host, one clock; nothing to compare")
    from datetime import timedelta

    from gpulease.services.platform import workers

    real = workers.wall_clock
    monkeypatch.setattr(workers, "wall_clock", lambda: real() + timedelta(seconds=60))
    iid = place(fleet, tenant, key)
    worker = Worker(fleet, owner="skewed")
    assert worker.step() is False and worker.clock_off is not None
    assert "60" in worker.clock_off and "ahead of the database's" in worker.clock_off
    assert instances.show_instance(fleet, tenant.principal, iid).status == "pending"
    monkeypatch.setattr(workers, "wall_clock", real)  # NTP fixed it
    worker._clock_checked = -1e9  # the next heartbeat
    worker.run_until_idle(timeout_s=30)
    assert worker.clock_off is None
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"


def test_a_worker_on_postgresql_measures_time_on_the_database_s_clock(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """A process whose steady clock started an hour behind (the host's clock was wrong when
    it started, and NTP put it right since) takes the database's time at its first
    heartbeat: what it writes is dated by the database's clock, not an hour back."""
    if fleet.db.dialect != "postgresql":
        pytest.skip("SQLite: one host, one clock; nothing to anchor to")
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import func

    from gpulease.db.tables import Event
    from gpulease.ports.clock import SteadyClock

    fleet.clock = SteadyClock(lambda: datetime.now(UTC) - timedelta(hours=1))
    iid = place(fleet, tenant, key)
    worker = Worker(fleet, owner="anchored")
    assert worker.step() is True and worker.clock_off is None
    with fleet.db.read() as s:
        database = s.scalar(select(func.now()))
        newest = s.scalar(select(func.max(Event.at)).where(Event.instance_id == iid))
    assert database is not None and newest is not None
    assert abs((newest - database).total_seconds()) < 5  # the deploy's start
    assert abs((fleet.clock.now() - database).total_seconds()) < 5
