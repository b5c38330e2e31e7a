"""The worker's periodic jobs, one table (`SCHEDULE`), and the scheduler that runs them.

Each job (worker/jobs/<family>/<job>.py) runs at its own interval on a thread of its own,
never inside a pipeline's thread, and one run of a job at a time per process: a slow job
(a BMC sweep behind slow BMCs) delays only itself, never a stage timeout, a lease sweep or
an invoice run. Several workers may run the same job at once: each claims or locks what it
changes. `run_due()` runs the due jobs in the caller's thread instead (tests, benches)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from gpulease.drivers.on_behalf import acting_for
from gpulease.platform import Platform
from gpulease.process_metrics import PERIODIC_ERRORS, PERIODIC_RUNS, PERIODIC_SECONDS
from gpulease.services.platform.sites import EVERYWHERE, Scope
from gpulease.worker.jobs.accounts import password_resets
from gpulease.worker.jobs.catalog import follow
from gpulease.worker.jobs.fleet import bmc_logs, safe_off, timeouts
from gpulease.worker.jobs.job import Job
from gpulease.worker.jobs.money import budgets, invoices, leases, meter, spending
from gpulease.worker.jobs.platform import audit, notices
from gpulease.worker.jobs.storage import backup_schedule, quota
from gpulease.worker.jobs.storage import meter as storage_meter
from gpulease.worker.jobs.support import repair_windows, ticket_clocks
from gpulease.worker.jobs.telemetry import idle, retention

log = logging.getLogger("gpulease.worker")

SCHEDULE: tuple[Job, ...] = (
    follow.JOB,
    timeouts.JOB,
    safe_off.JOB,
    bmc_logs.JOB,
    leases.JOB,
    backup_schedule.JOB,
    storage_meter.JOB,
    quota.JOB,
    meter.JOB,
    spending.JOB,
    budgets.JOB,
    invoices.JOB,
    notices.JOB,
    password_resets.JOB,
    ticket_clocks.JOB,
    repair_windows.JOB,
    retention.JOB,
    idle.JOB,
    audit.JOB,
)


def run_job(p: Platform, job: Job, owner: str, scope: Scope = EVERYWHERE) -> None:
    """One run of `job`, counted and timed (`/metrics` of the worker); its trouble logged,
    never raised: the next run tries again. A job that reaches servers runs on the
    worker's `scope`."""
    PERIODIC_RUNS.labels(job.name).inc()
    try:
        with PERIODIC_SECONDS.labels(job.name).time(), \
                PERIODIC_ERRORS.labels(job.name).count_exceptions(), acting_for(owner):
            if job.at_site is not None:
                job.at_site(p, scope)
            else:
                job.run(p, owner)
    except Exception:
        log.exception("periodic job %s failed", job.name)


class Scheduler:
    """Runs `jobs` at their intervals: `start()` on threads of their own, or `run_due()`
    in the caller's thread."""

    def __init__(self, p: Platform, owner: str, jobs: tuple[Job, ...] = SCHEDULE,
                 scale: float = 1.0, scope: Callable[[], Scope] = lambda: EVERYWHERE
                 ) -> None:
        self.p, self.owner, self.jobs, self.scope = p, owner, jobs, scope
        self.scale = scale  # the intervals times this (tests run them more often)
        self._next: dict[str, float] = {job.name: 0.0 for job in jobs}
        self._running: set[str] = set()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._runs: set[Future[None]] = set()

    def _take_due(self, now: float) -> list[Job]:
        """The jobs due at `now` and not running, marked running with their next time."""
        with self._mutex:
            due = [job for job in self.jobs
                   if self._next[job.name] <= now and job.name not in self._running]
            for job in due:
                self._running.add(job.name)
                self._next[job.name] = now + job.every_s(self.p.settings) * self.scale
            return due

    def _run(self, job: Job) -> None:
        try:
            run_job(self.p, job, self.owner, self.scope())
        finally:
            with self._mutex:
                self._running.discard(job.name)

    def run_due(self) -> int:
        """Run the due jobs now, one after another, in this thread; returns how many ran."""
        due = self._take_due(time.monotonic())
        for job in due:
            self._run(job)
        return len(due)

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=len(self.jobs),
                                        thread_name_prefix="gpulease-job")
        self._thread = threading.Thread(target=self._loop, name="gpulease-scheduler",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        assert self._pool is not None
        while not self._stop.is_set():
            for job in self._take_due(time.monotonic()):
                run = self._pool.submit(self._run, job)
                self._runs.add(run)
                run.add_done_callback(self._runs.discard)
            with self._mutex:
                waiting = [t for name, t in self._next.items() if name not in self._running]
            pause = min(waiting, default=time.monotonic() + 1.0) - time.monotonic()
            self._stop.wait(min(max(pause, 0.05), 1.0))

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._pool is not None:  # the runs under way end (each bounded), then the threads
            wait(list(self._runs), timeout=timeout_s)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
