"""Which tables this process has changed: a count per table of committed transactions that
inserted, updated or deleted its rows through this engine (the ORM's flushes included).

A reader that keeps something derived from a few tables (the catalog's stock: nodes, GPUs,
allocations) notes their counts before it reads, and reads again once they moved. A count
moves after the commit, when the connection goes back to the pool or begins its next
transaction, so a reader that saw the old count may have read before the change but never
keeps a read that missed it past the next look. Changes made by other processes are not
seen here: such a reader also bounds how long it keeps an answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.sql.dml import UpdateBase

# keys of a connection's info (its pool record's: it outlives one checkout)
_WRITING = "gpulease_tables_writing"  # written in the open transaction
_COMMITTED = "gpulease_tables_committed"  # committed, not counted yet


class TableChanges:
    """Counts, per table, the committed transactions of this engine that wrote to it."""

    def __init__(self, engine: Engine) -> None:
        self._commits: dict[str, int] = {}
        self._lock = threading.Lock()
        event.listen(engine, "after_execute", self._after_execute)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "checkin", self._checkin)

    def seen(self, tables: Iterable[str]) -> tuple[int, ...]:
        """The counts of these tables now; compare with an earlier call's."""
        return tuple(self._commits.get(t, 0) for t in tables)

    def _after_execute(self, conn: Connection, statement: Any, *_: Any) -> None:
        if isinstance(statement, UpdateBase):  # INSERT, UPDATE, DELETE
            name = getattr(getattr(statement, "table", None), "name", None)
            if name is not None:
                conn.info.setdefault(_WRITING, set()).add(name)

    def _commit(self, conn: Connection) -> None:
        # the event comes before the database commits: counted once it has
        written = conn.info.pop(_WRITING, None)
        if written:
            conn.info.setdefault(_COMMITTED, set()).update(written)

    def _rollback(self, conn: Connection) -> None:
        if not conn.invalidated:  # a dropped connection's info goes with it
            conn.info.pop(_WRITING, None)

    def _begin(self, conn: Connection) -> None:
        self._count(conn.info)

    def _checkin(self, _dbapi_conn: Any, record: Any) -> None:
        self._count(record.info)

    def _count(self, info: dict[Any, Any]) -> None:
        committed = info.pop(_COMMITTED, None)
        if committed:
            with self._lock:
                for name in committed:
                    self._commits[name] = self._commits.get(name, 0) + 1
