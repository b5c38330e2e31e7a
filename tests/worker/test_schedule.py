"""The scheduler: every periodic job on a thread of its own, so a BMC sweep stuck behind
slow BMCs delays no stage timeout; a job runs once at a time per process; a job's trouble
is logged and the next run tries again; the table lists each job module once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.ports.bmc import Bmc, BmcLog
from gpulease.schemas import OrderRequest
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.worker.jobs.job import Job
from gpulease.worker.runner import Worker
from gpulease.worker.schedule import SCHEDULE, Scheduler

BMC_ANSWERS_IN_S = 5.0
HELD_AT_MOST_S = 60.0
H100 = dict(sku="h100-80g-x8", region="ningxia-1")


class SlowLogs:
    """A BMC whose log service answers in BMC_ANSWERS_IN_S (power and media as usual);
    its first answer waits, besides, until the test has seen what it waits for (at most
    HELD_AT_MOST_S), so that a busy machine cannot make the test's point by chance."""

    started = threading.Event()
    answered = threading.Event()
    release = threading.Event()

    def __init__(self, bmc: Bmc) -> None:
        self._bmc = bmc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bmc, name)

    def event_log(self, seen: object = None) -> BmcLog:
        first = not SlowLogs.started.is_set()
        SlowLogs.started.set()
        time.sleep(BMC_ANSWERS_IN_S)
        if first:
            SlowLogs.release.wait(HELD_AT_MOST_S)
        SlowLogs.answered.set()
        return self._bmc.event_log()


def test_a_slow_bmc_sweep_does_not_delay_a_stage_timeout(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    fleet.settings.bmc_events = False  # the log read alone is slow here
    fleet.settings.stage_timeout_s = 3.0  # the stuck node times out while the sweep waits;
    # the first order's own stages, on a loaded machine, stay well inside it
    fleet.settings.job_io_concurrency = 1  # one BMC at a time: the sweep takes its time
    real = fleet.drivers.bmc["simulated"]
    fleet.drivers.bmc["simulated"] = lambda endpoint: SlowLogs(real(endpoint))
    SlowLogs.started.clear()
    SlowLogs.answered.clear()
    SlowLogs.release.clear()
    worker = Worker(fleet, owner="slow-bmc", sweep_every_s=0.05)  # jobs every 50 ms
    worker.start(threads=2)
    try:
        first = orders.place_order(fleet, tenant.principal, OrderRequest(
            ssh_keys=[key], **H100))[0].id  # its node is watched by the BMC sweep
        assert SlowLogs.started.wait(30), "the BMC sweep never asked a BMC"
        stuck = orders.place_order(fleet, tenant.principal, OrderRequest(
            ssh_keys=[key], **H100))[0].id
        name = instances.show_instance(fleet, tenant.principal, stuck).nodes[0].name
        assert fleet.drivers.fleet is not None
        fleet.drivers.fleet.inject_fault(name, "agent_up", "hang", times=1000)
        failed_at = None
        for _ in range(800):  # bounded: 40 s
            with fleet.db.read() as s:
                node = s.query(Node).filter(Node.name == name).one()
            if node.status == "maintenance":
                failed_at = time.monotonic()
                break
            time.sleep(0.05)
        answered_before = SlowLogs.answered.is_set()
    finally:
        SlowLogs.release.set()
        worker.stop()
    assert failed_at is not None, "the stage never timed out"
    assert "timed out" in (node.status_reason or "")
    # the stage timed out while the BMC sweep still waited on the slow BMC's first answer
    assert not answered_before
    assert instances.show_instance(fleet, tenant.principal, first).status in (
        "deploying", "ready")


def test_a_job_runs_once_at_a_time_and_its_trouble_is_only_logged(
    platform: Platform
) -> None:
    runs: list[str] = []
    inside = threading.Event()
    release = threading.Event()

    def slow(p: Platform, owner: str) -> None:
        runs.append(owner)
        inside.set()
        release.wait(10)

    def broken(p: Platform, owner: str) -> None:
        runs.append("broken")
        raise RuntimeError("the job's own trouble")

    jobs = (Job("slow", slow, "waits", every_s=lambda st: 0.0),
            Job("broken", broken, "raises", every_s=lambda st: 0.0))
    scheduler = Scheduler(platform, "me", jobs)
    scheduler.start()
    try:
        assert inside.wait(10)
        for _ in range(100):  # bounded: the broken job runs again and again meanwhile
            if runs.count("broken") >= 3:
                break
            time.sleep(0.02)
        assert runs.count("me") == 1  # the slow one is still in its first run
        assert runs.count("broken") >= 3  # raising stopped nothing
    finally:
        release.set()
        scheduler.stop()


def test_the_schedule_lists_every_job_module_once() -> None:
    jobs_dir = Path(__file__).resolve().parents[2] / "gpulease" / "worker" / "jobs"
    modules = {f"gpulease.worker.jobs.{p.parent.name}.{p.stem}"
               for p in jobs_dir.glob("*/*.py") if p.name != "__init__.py"}
    listed = [job.run.__module__ for job in SCHEDULE]
    assert sorted(listed) == sorted(modules)
    assert len({job.name for job in SCHEDULE}) == len(SCHEDULE)


def test_sweep_runs_the_due_jobs_in_the_callers_thread(fleet: Platform) -> None:
    worker = Worker(fleet, owner="inline")
    assert worker.sweep() == len(SCHEDULE)  # all due at first
    assert worker.sweep() == 0  # none due again within its interval
