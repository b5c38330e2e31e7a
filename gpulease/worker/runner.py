"""The worker: threads that claim due rows and drive them, a heartbeat for held locks,
and the periodic timeout sweep. Runs inside `gpulease up` or alone as `gpulease worker`;
any number of workers may share one PostgreSQL database."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.exc import DBAPIError

from gpulease.db.ops_tables import Backup
from gpulease.db.session import transient
from gpulease.db.tables import Instance, Node
from gpulease.domain.states import NODE_IN_PIPELINE, BackupStatus
from gpulease.platform import Platform
from gpulease.process_metrics import PERIODIC_ERRORS, PERIODIC_RUNS, PERIODIC_SECONDS
from gpulease.services.platform import workers
from gpulease.services.storage import backups, saved_images
from gpulease.worker.pipelines.base import LockRegistry, claim_due, heartbeat
from gpulease.worker.pipelines.instances import process_instance
from gpulease.worker.pipelines.nodes import process_node
from gpulease.worker.schedule import PERIODICS

log = logging.getLogger("gpulease.worker")


class Worker:
    def __init__(self, p: Platform, owner: str | None = None, sweep_every_s: float = 5.0) -> None:
        self.p = p
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.locks = LockRegistry()
        self.sweep_every_s = sweep_every_s
        self._last_sweep = 0.0
        self._sweep_mutex = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._claims = 0  # since the last heartbeat (the registry adds them up)

    # -- one unit of work ------------------------------------------------------------
    def step(self) -> bool:
        """Claim and drive at most one node and one instance. True if anything was due."""
        did = False
        for table, process in ((Node, process_node), (Instance, process_instance)):
            extra: list[ColumnElement[bool]] | None = [
                Node.status.in_([st.value for st in NODE_IN_PIPELINE])] if table is Node else None
            for claim in claim_due(self.p, table, self.owner, limit=1, extra=extra):
                did = True
                self._claims += 1
                self.locks.add(claim)
                try:
                    process(self.p, claim)
                except Exception:  # never let one row kill the thread; its lock expires
                    log.exception("processing %s %s failed", table.__name__, claim.id)
                finally:
                    self.locks.discard(claim)
        if backups.drive(self.p, limit=1):  # a backup or restore due (row-locked inside)
            did = True
        if saved_images.drive_saves(self.p, limit=1):  # a container to save (claimed)
            did = True
        self._maybe_sweep()
        return did

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < self.sweep_every_s or not self._sweep_mutex.acquire(False):
            return
        try:
            self._last_sweep = now
            for job in PERIODICS:
                PERIODIC_RUNS.labels(job.name).inc()
                with PERIODIC_SECONDS.labels(job.name).time(), \
                        PERIODIC_ERRORS.labels(job.name).count_exceptions():
                    job.run(self.p, self.owner)
        finally:
            self._sweep_mutex.release()

    def has_work(self) -> bool:
        """A node mid-deploy/clean (even if waiting on backoff or a poll), or a due instance."""
        now = self.p.clock.now()
        with self.p.db.read() as s:
            node = s.scalar(select(Node.id).where(
                Node.status.in_([st.value for st in NODE_IN_PIPELINE]),
                Node.next_attempt_at.is_not(None)).limit(1))
            inst = s.scalar(select(Instance.id).where(Instance.next_attempt_at <= now).limit(1))
            run = s.scalar(select(Backup.id).where(or_(  # running, or queued and due
                Backup.status == BackupStatus.RUNNING.value,
                and_(Backup.status == BackupStatus.QUEUED.value,
                     or_(Backup.next_attempt_at.is_(None), Backup.next_attempt_at <= now))))
                .limit(1))
        return (node is not None or inst is not None or run is not None
                or saved_images.save_due(self.p))

    def run_until_idle(self, timeout_s: float = 30.0, settle_s: float = 0.0) -> None:
        """For tests and benches: work until no row has work left, or time out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.step():
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
        workers.register(self.p, self.owner, count)
        for i in range(count):
            t = threading.Thread(target=self._loop, name=f"gpulease-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="gpulease-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)

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
        started = bool(self._threads)
        for t in self._threads:
            t.join(timeout_s)
        self._threads.clear()
        if started:
            try:
                workers.stopped(self.p, self.owner)
            except Exception:  # the database may be gone at shutdown; it will look dead
                log.warning("could not mark worker %s stopped", self.owner)
