"""The worker: threads that claim due rows of the pipelines and drive them a step at a time
(worker/pipelines/), a heartbeat for the claims they hold, and the scheduler of the
periodic jobs on threads of their own (worker/schedule.py). Runs inside `gpulease up` or
alone as `gpulease worker`; any number of workers may share one PostgreSQL database."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime

from sqlalchemy.exc import DBAPIError

from gpulease.db.session import transient
from gpulease.platform import Platform
from gpulease.services.platform import sites, workers
from gpulease.worker.jobs.fleet import timeouts
from gpulease.worker.pipelines import backup_runs, image_saves, instances, nodes, power_actions
from gpulease.worker.pipelines.base import LockRegistry, Pipeline, drive, heartbeat, pending
from gpulease.worker.schedule import Scheduler

log = logging.getLogger("gpulease.worker")

# Every kind of row the worker drives, in the order a step looks at them.
PIPELINES: tuple[Pipeline, ...] = (
    nodes.PIPELINE,
    instances.PIPELINE,  # containers start and stop in the instance's steps
    backup_runs.PIPELINE,
    image_saves.PIPELINE,
    power_actions.PIPELINE,  # a tenant's reboot, power cycle or restart
)


class Worker:
    def __init__(self, p: Platform, owner: str | None = None, sweep_every_s: float = 5.0,
                 site: str | None = None) -> None:
        sites.check_site(p, site)
        self.p = p
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.site = site  # the data centre whose servers it serves; None: those without one
        self.locks = LockRegistry()
        # The periodic jobs' intervals are their settings' times sweep_every_s / 5 (the
        # default sweep): a test's worker may run them more or less often.
        self.sweep_every_s = sweep_every_s
        self.scheduler = Scheduler(p, self.owner, scope=self.scope)
        self._scope: tuple[datetime, sites.Scope] | None = None  # (looked at, what)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._claims = 0  # since the last heartbeat (the registry adds them up)
        self._clock_checked = -1e9  # monotonic time of the last clock comparison
        self.clock_off: str | None = None  # why this worker claims nothing, if it does not

    def _check_clock(self) -> None:
        """Every heartbeat: is this host's clock within GPULEASE_MAX_CLOCK_SKEW_S of the
        database's? If not, claiming stops (and says so) until it is again."""
        if time.monotonic() - self._clock_checked < workers.heartbeat_s(self.p):
            return
        self._clock_checked = time.monotonic()
        skew = workers.clock_skew_s(self.p)
        bound = self.p.settings.max_clock_skew_s
        was = self.clock_off
        if skew is not None and abs(skew) > bound:
            self.clock_off = (f"this host's clock is {abs(skew):.1f} s "
                              f"{'ahead of' if skew > 0 else 'behind'} the database's (bound "
                              f"{bound:.0f} s, GPULEASE_MAX_CLOCK_SKEW_S): claiming stopped "
                              "until they agree; sync the host's time (NTP)")
            if was is None:
                log.error("worker %s: %s", self.owner, self.clock_off)
        else:
            self.clock_off = None
            if was is not None:
                log.warning("worker %s: clock back within %.0f s of the database's; "
                            "claiming again", self.owner, bound)

    def scope(self) -> sites.Scope:
        """The regions this worker serves, looked at again once a heartbeat (a site that
        gets a worker of its own leaves the workers without a site within one)."""
        now = self.p.clock.now()
        if self._scope is None or abs((now - self._scope[0]).total_seconds()) >= \
                workers.heartbeat_s(self.p):
            self._scope = (now, sites.scope_of(self.p, self.site))
        return self._scope[1]

    # -- one unit of work ------------------------------------------------------------
    def step(self) -> bool:
        """Claim and drive at most one row of each pipeline. True if anything was due.
        Nothing while this host's clock is off from the database's (`clock_off`)."""
        self._check_clock()
        if self.clock_off is not None:
            return False
        did = False
        scope = self.scope()
        for pipeline in PIPELINES:
            stepped = drive(self.p, pipeline, limit=1, owner=self.owner, locks=self.locks,
                            scope=scope)
            self._claims += stepped
            did = did or bool(stepped)
        return did

    def sweep(self) -> int:
        """The periodic jobs that are due, run now in this thread (tests and benches drive
        a worker without its threads); returns how many ran."""
        self.scheduler.scale = self.sweep_every_s / 5.0
        return self.scheduler.run_due()

    def has_work(self) -> bool:
        """A row of any pipeline with work left in this worker's regions: due, or waiting
        on a backoff or a poll."""
        scope = self.scope()
        return any(pending(self.p, pipeline, scope) for pipeline in PIPELINES)

    def run_until_idle(self, timeout_s: float = 30.0, settle_s: float = 0.0) -> None:
        """For tests and benches: work until no row has work left, or time out. The
        periodic jobs run between steps when due, in this thread."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            did = self.step()
            self.sweep()
            if did:
                continue
            if not self.has_work():
                if settle_s:
                    time.sleep(settle_s)
                    if self.has_work():
                        continue
                return
            time.sleep(0.005)
        raise TimeoutError(f"worker still busy after {timeout_s} s")

    # -- threads -----------------------------------------------------------------------
    def start(self, threads: int | None = None) -> None:
        count = threads or self.p.settings.worker_threads
        outage_s = workers.register(self.p, self.owner, count, self.site)
        self._scope = None  # registered: look again
        timeouts.pause_for_outage(self.p, outage_s)  # before any sweep can fail them
        for i in range(count):
            t = threading.Thread(target=self._loop, name=f"gpulease-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="gpulease-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        self.scheduler.scale = self.sweep_every_s / 5.0
        self.scheduler.start()

    def _loop(self) -> None:
        pause = 0.5
        while not self._stop.is_set():
            try:
                did = self.step()
                pause = 0.5
            except DBAPIError as exc:  # the database away or busy: back off, try again
                if not transient(exc):
                    log.exception("worker step failed")
                else:
                    log.warning("database unavailable (%s); next try in %.1f s",
                                str(exc.orig or exc).strip().splitlines()[0], pause)
                did = False
                self._stop.wait(pause)
                pause = min(pause * 2, 10.0)
            except Exception:  # never let one bug stop the thread
                log.exception("worker step failed")
                did = False
                self._stop.wait(1.0)
            if not did:
                self.p.wake_event.wait(self.p.settings.poll_interval_s)
                self.p.wake_event.clear()

    def _heartbeat_loop(self) -> None:
        interval = workers.heartbeat_s(self.p)
        while not self._stop.wait(interval):
            try:
                heartbeat(self.p, self.locks)
                claims, self._claims = self._claims, 0
                workers.seen(self.p, self.owner, claims)
            except Exception:
                log.exception("heartbeat failed")

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.p.wake_event.set()
        self.scheduler.stop(timeout_s)
        started = bool(self._threads)
        for t in self._threads:
            t.join(timeout_s)
        self._threads.clear()
        if started:
            try:
                workers.stopped(self.p, self.owner)
            except Exception:  # the database may be gone at shutdown; it will look dead
                log.warning("could not mark worker %s stopped", self.owner)
