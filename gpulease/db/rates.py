"""Hit counters in fixed windows, kept where every API process sees them: the rate limits'
memory. By default the database counts (SQLite or PostgreSQL: each process adds its hits to
a shared row at the next sync, every `sync_s`, and reads the totals back, so a limit holds
across processes, `serve --workers N` included, within that lag and the request's path has
no database round trip); with GPULEASE_REDIS_URL set, Redis counts exactly;
GPULEASE_RATE_LIMIT_STORE=memory keeps one process's counts in its memory.

`sliding()` reads two fixed windows as one sliding window (the previous window's hits
weighted by how much of it still lies within the last `window_s` seconds), so a burst
across a window's edge is not let through twice; `sliding_wait()` is how long until a
sliding count falls under a limit (a 429's Retry-After)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import redis
from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gpulease.db.tables import RateCounter

log = logging.getLogger("gpulease.limits")
Slot = tuple[str, int, int]  # (key, window seconds, window number)


class RateStore(Protocol):
    def hit(self, key: str, window_s: int, now: float) -> int:
        """Count one hit of `key` in the window holding `now`; the window's count so far."""
        ...

    def count(self, key: str, window_s: int, now: float) -> int:
        """The window's count, without adding to it."""
        ...

    def sync_due(self, now: float) -> bool:
        """Whether `sync(now)` should run before the next hit (shared stores only)."""
        ...

    def sync(self, now: float) -> None: ...


def _slot(key: str, window_s: int, now: float) -> Slot:
    return key, window_s, int(now // window_s)


def _recent(slot: Slot, now: float) -> bool:
    """The slot is the current window or the one before it (sliding() reads both)."""
    return (slot[2] + 2) * slot[1] >= now


def window_end(window_s: int, now: float) -> float:
    return float((int(now // window_s) + 1) * window_s)


def sliding(store: RateStore, key: str, window_s: int, now: float) -> float:
    """Hits of `key` in the last `window_s` seconds, estimated from the current window and
    the share of the previous one that the last `window_s` seconds still cover."""
    into = (now % window_s) / window_s
    return (store.count(key, window_s, now - window_s) * (1.0 - into)
            + store.count(key, window_s, now))


def sliding_wait(store: RateStore, key: str, window_s: int, limit: int, now: float) -> float:
    """Seconds until the sliding count of `key` falls under `limit` (0 when it is)."""
    previous = store.count(key, window_s, now - window_s)
    current = store.count(key, window_s, now)
    into = (now % window_s) / window_s
    if previous * (1.0 - into) + current < limit:
        return 0.0
    if current < limit:  # within this window, once enough of the previous one slid out
        share = 1.0 - (limit - current) / previous
        return max(0.0, (share - into) * window_s) + 1.0
    # the next window: this one's hits slide out in their turn
    return (window_end(window_s, now) - now) + (1.0 - limit / current) * window_s + 1.0


class MemoryStore:
    """One process's counters: right for the embedded default (API and worker in one
    process on SQLite)."""

    def __init__(self) -> None:
        self._counts: dict[Slot, int] = {}
        self._lock = threading.Lock()
        self._swept = 0.0

    def hit(self, key: str, window_s: int, now: float) -> int:
        slot = _slot(key, window_s, now)
        with self._lock:
            self._counts[slot] = self._counts.get(slot, 0) + 1
            if now - self._swept > 60:
                self._swept = now
                for old in [s for s in self._counts if (s[2] + 2) * s[1] < now - 60]:
                    del self._counts[old]
            return self._counts[slot]

    def count(self, key: str, window_s: int, now: float) -> int:
        with self._lock:
            return self._counts.get(_slot(key, window_s, now), 0)

    def sync_due(self, now: float) -> bool:
        return False

    def sync(self, now: float) -> None:
        pass


class DatabaseStore:
    """Counters shared by several API processes through the database: a hit counts at once
    in this process and joins the shared row at the next sync."""

    def __init__(self, engine: Engine, sync_s: float = 0.5) -> None:
        self._engine, self._sync_s = engine, sync_s
        self._pending: dict[Slot, int] = {}
        self._known: dict[Slot, int] = {}  # the shared counts as of the last sync
        self._lock = threading.Lock()
        self._syncing = threading.Lock()
        self._synced = 0.0

    def hit(self, key: str, window_s: int, now: float) -> int:
        slot = _slot(key, window_s, now)
        with self._lock:
            self._pending[slot] = self._pending.get(slot, 0) + 1
            return self._known.get(slot, 0) + self._pending[slot]

    def count(self, key: str, window_s: int, now: float) -> int:
        slot = _slot(key, window_s, now)
        with self._lock:
            return self._known.get(slot, 0) + self._pending.get(slot, 0)

    def sync_due(self, now: float) -> bool:
        return now - self._synced >= self._sync_s

    def sync(self, now: float) -> None:
        """Add this process's hits to the shared rows and learn everyone's totals."""
        if not self._syncing.acquire(blocking=False):
            return  # another thread of this process is at it
        try:
            self._synced = now
            with self._lock:
                pending, self._pending = self._pending, {}
                current = [s for s in {*self._known, *pending} if _recent(s, now)]
            try:
                totals = self._exchange(pending, current, now)
            except Exception as exc:  # the database away: keep the hits, try next time
                log.warning("rate counters not synced: %s", str(exc).splitlines()[0])
                with self._lock:
                    for slot, hits in pending.items():
                        self._pending[slot] = self._pending.get(slot, 0) + hits
                return
            with self._lock:
                self._known = {s: totals.get(s, 0) for s in current} | {
                    s: c for s, c in totals.items() if _recent(s, now)}
        finally:
            self._syncing.release()

    def _exchange(self, pending: dict[Slot, int], current: list[Slot], now: float
                  ) -> dict[Slot, int]:
        totals: dict[Slot, int] = {}
        upsert = pg_insert if self._engine.dialect.name == "postgresql" else sqlite_insert
        with self._engine.begin() as conn:
            if pending:
                stmt = upsert(RateCounter).values([
                    {"key": k, "window_s": w, "number": n, "hits": c}
                    for (k, w, n), c in sorted(pending.items())])
                conn.execute(stmt.on_conflict_do_update(
                    index_elements=["key", "window_s", "number"],
                    set_={"hits": RateCounter.hits + stmt.excluded.hits}))
            if current:
                for k, w, n, c in conn.execute(select(
                        RateCounter.key, RateCounter.window_s, RateCounter.number,
                        RateCounter.hits).where(RateCounter.key.in_({s[0] for s in current}))):
                    totals[(k, w, n)] = c
            conn.execute(delete(RateCounter).where(
                (RateCounter.number + 1) * RateCounter.window_s < int(now) - 3600))
        return totals


class RedisStore:
    """Exact shared counters in Redis (INCR with an expiry per window)."""

    def __init__(self, url: str) -> None:
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=1.0)

    @staticmethod
    def _name(key: str, window_s: int, now: float) -> str:
        k, w, n = _slot(key, window_s, now)
        return f"gpulease:rate:{k}:{w}:{n}"

    def hit(self, key: str, window_s: int, now: float) -> int:
        name = self._name(key, window_s, now)
        pipe = self._redis.pipeline()
        pipe.incr(name)
        pipe.expire(name, 2 * window_s + 60)  # the previous window is read by sliding()
        count, _ = pipe.execute()
        return int(count)

    def count(self, key: str, window_s: int, now: float) -> int:
        return int(self._redis.get(self._name(key, window_s, now)) or 0)

    def sync_due(self, now: float) -> bool:
        return False

    def sync(self, now: float) -> None:
        pass
