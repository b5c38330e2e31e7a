"""The audit trail's writer: one thread per process appends the rows requests hand it, all
that are waiting in one transaction, so a state-changing request answers without waiting
for its row (GPULEASE_AUDIT_WRITE=batch, the default). With `sync` each request's row is
committed before its answer leaves, at a price in throughput (bench/api_orders.py).

What a batch risks is the moment between a change and its row: a process killed there loses
the rows still queued (at most the last few milliseconds'), as a crash between a change's
commit and its row always could. A database that refuses a batch is retried with backoff,
in order; readers of the trail (listing, verify, prune) and a stopping process first wait
for the queue to drain."""

from __future__ import annotations

import logging
import threading

from gpulease.platform import Platform
from gpulease.services.platform import audit

log = logging.getLogger("gpulease.audit")
MAX_BATCH = 500
GIVE_UP_AFTER_CLOSE = 5  # tries left for a batch once the process is stopping


class AuditWriter:
    def __init__(self, p: Platform) -> None:
        self._p = p
        self._cond = threading.Condition()
        self._pending: list[audit.Happening] = []
        self._queued = self._done = 0  # rows handed over / rows written (or given up)
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, happening: audit.Happening) -> None:
        with self._cond:
            self._pending.append(happening)
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="audit-writer",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every row handed over so far is written; False on timeout."""
        with self._cond:
            target = self._queued
            return self._cond.wait_for(lambda: self._done >= target, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued and stop the thread (a later row starts it again)."""
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:
            self._closed = False

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._closed)
                if not self._pending:
                    return
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
            self._write(batch)
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()

    def _write(self, batch: list[audit.Happening]) -> None:
        delay, left = 0.05, GIVE_UP_AFTER_CLOSE
        while True:
            try:
                audit.append(self._p, batch)
                return
            except Exception:
                log.exception("audit rows not written yet (%d); retrying", len(batch))
            with self._cond:
                if self._closed:
                    left -= 1
                    if left == 0:
                        log.error("audit rows lost at shutdown: %s", batch)
                        return
                self._cond.wait(delay)
            delay = min(delay * 2, 5.0)


def writer(p: Platform) -> audit.Queue:
    """The platform's writer, made on first use."""
    return p.kept.made(audit.QUEUE, lambda: AuditWriter(p))
