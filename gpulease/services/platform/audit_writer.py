"""The audit trail's writer: one thread per process appends the rows requests hand it, all
that are waiting in one transaction, so a state-changing request answers without waiting
for its row (GPULEASE_AUDIT_WRITE=batch, the default). With `sync` each request's row is
committed before its answer leaves, at a price in throughput (bench/api_orders.py).

It never stops for one row. Every field is cleaned and cut to its column before it is
chained (services/platform/audit.py). A batch the database refuses for what it holds (a data,
integrity or programming error, not an outage) is written row by row, and a row still
refused is written in a reduced form that says so: when, the action, "row reduced". Only an
outage (the database unreachable or locked) or a process whose key is not the
installation's is retried, in order, with backoff; nothing behind a refused row waits.

What a batch risks is the moment between a change and its row: a process killed there loses
the rows still queued (at most the last few milliseconds'), as a crash between a change's
commit and its row always could. Readers of the trail (listing, verify, prune) and a
stopping process first wait for the queue to drain; a stopping process waits at most its
bound (`close`), then logs what it could not write. The queue's depth and the age of its
oldest row are metrics (process_metrics.py), with an alert when rows wait (the
control-plane rules)."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DataError, IntegrityError, NotSupportedError, ProgrammingError

from gpulease import process_metrics
from gpulease.ports.records import Keeping, Sealed
from gpulease.services.platform import audit

log = logging.getLogger("gpulease.audit")
MAX_BATCH = 500
REFUSED = (DataError, IntegrityError, ProgrammingError, NotSupportedError, ValueError,
           TypeError)  # what the rows hold, not whether the database is there


class AuditWriter:
    def __init__(self, p: Keeping) -> None:
        self._p = p
        self._cond = threading.Condition()
        self._pending: list[tuple[float, audit.Happening]] = []  # (handed over, row)
        self._queued = self._done = 0  # rows handed over / rows written (or given up)
        self._closing = False
        self._thread: threading.Thread | None = None
        self._writing_since: float | None = None  # when the batch being written was handed
        process_metrics.watch_audit_queue(self.depth_and_age)

    def depth_and_age(self) -> tuple[int, float]:
        """Rows waiting, and how long the oldest has waited (s)."""
        with self._cond:
            waiting = self._queued - self._done
            oldest = self._pending[0][0] if self._pending else self._writing_since
        return waiting, (time.monotonic() - oldest) if waiting and oldest else 0.0

    def submit(self, happening: audit.Happening) -> None:
        with self._cond:
            self._pending.append((time.monotonic(), happening))
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

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, within `timeout_s` in all, and stop the thread (a later row
        starts it again); rows still unwritten then are logged and counted as lost."""
        deadline = time.monotonic() + timeout_s
        self.flush(timeout_s)
        with self._cond:
            self._closing = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None:
            thread.join(max(0.1, deadline - time.monotonic()) + 1.0)
        with self._cond:
            self._closing = False

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._closing)
                if not self._pending:
                    return
                taken = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                self._writing_since = taken[0][0]
            self._write([h for _, h in taken])
            with self._cond:
                self._done += len(taken)
                self._writing_since = None
                self._cond.notify_all()

    def _write(self, batch: list[audit.Happening]) -> None:
        """Write `batch`: retried through an outage, split and reduced where refused."""
        delay = 0.05
        while True:
            try:
                _written(self._p, batch)
                return
            except Exception as gone:  # an outage, or a key that is not the installation's
                with self._cond:
                    if self._closing:
                        process_metrics.AUDIT_ROWS_LOST.inc(len(batch))
                        log.error("audit rows lost at shutdown (%s): %s", gone, batch)
                        return
                log.warning("audit rows not written yet (%d): %s; retrying in %.2f s",
                            len(batch), gone, delay)
                with self._cond:
                    self._cond.wait(delay)
            delay = min(delay * 2, 5.0)


def _written(p: Sealed, batch: list[audit.Happening]) -> None:
    """Append `batch`; when the database refuses what it holds, each row alone, and a row
    still refused in its reduced form. Raises only for an outage or a foreign key."""
    try:
        audit.append(p, batch)
        return
    except REFUSED as refused:
        if len(batch) == 1:
            why = type(refused).__name__
            log.error("audit row refused by the database (%s), written reduced: %r",
                      refused, batch[0])
            try:
                audit.append(p, [audit.reduced(batch[0], why)])
                process_metrics.AUDIT_ROWS_REDUCED.inc()
            except REFUSED:
                log.error("audit row lost: even its reduced form was refused: %r", batch[0])
                process_metrics.AUDIT_ROWS_LOST.inc()
            return
    for one in batch:
        _written(p, [one])


def writer(p: Keeping) -> audit.Queue:
    """The platform's writer, made on first use."""
    return p.kept.made(audit.QUEUE, lambda: AuditWriter(p))
