"""Engine and transactions for SQLite and PostgreSQL.

SQLite has no row locks, so write transactions start with BEGIN IMMEDIATE: the writer
takes the database's write lock up front and concurrent writers queue on busy_timeout
instead of failing half-way. Reads use a plain deferred BEGIN under WAL. Within one
process, threads take turns at the SQLite file before they begin (`db/turns.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gpulease.db.changes import TableChanges
from gpulease.db.limits import SessionLimits
from gpulease.db.turns import SqliteTurns

# Less free space than this under a SQLite file: /healthz says the disk is full (a write of
# a page, the journal and the WAL would fail before long)
FULL_BELOW_BYTES = 16 * 2**20

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, pool_size: int = 20, limits: SessionLimits | None = None,
                max_overflow: int = 20) -> Engine:
    if url.startswith("sqlite"):
        # Pooled: a connection's PRAGMAs run once, not per transaction.
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 60},
            pool_size=pool_size, max_overflow=max_overflow,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            immediate = conn.get_execution_options().get("sqlite_immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    limits = limits or SessionLimits()
    engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow,
                           pool_pre_ping=True,
                           connect_args=limits.connect_args())

    @event.listens_for(engine, "do_connect")
    def _session_limits(_dialect: Any, _record: Any, _args: Any, params: dict[str, Any]) -> None:
        # beside whatever `options` the URL carries (a search_path, say)
        params["options"] = " ".join(filter(None, (params.get("options"), limits.options())))

    return engine


def _owner_only(db_file: Path) -> None:
    """The SQLite file, readable by its owner alone (its WAL and shared-memory files take
    the database file's permissions)."""
    if db_file.name in ("", ":memory:") or not db_file.parent.exists():
        return
    os.close(os.open(db_file, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(db_file, 0o600)


class DatabaseUnreachable(RuntimeError):
    """The database did not answer within the wait at start."""


def transient(exc: BaseException) -> bool:
    """A database error that says nothing about the request: the connection dropped, a
    deadlock or serialization failure, a lock or statement timeout, a busy SQLite file.
    Retrying later (or elsewhere) can succeed; nothing of the failed transaction stays."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


class Database:
    """Hands out short transactions: `with db.write() as s:` / `with db.read() as s:`."""

    def __init__(self, url: str, pool_size: int = 20, limits: SessionLimits | None = None,
                 max_overflow: int = 20, sqlite_read_slots: int = 2) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            _owner_only(Path(url.removeprefix("sqlite:///").split("?", 1)[0]))
        self.engine = make_engine(url, pool_size, limits, max_overflow)
        self.dialect = self.engine.dialect.name
        self.changes = TableChanges(self.engine)  # what this process committed, by table
        writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        # one process's threads take turns at a SQLite file (db/turns.py); PostgreSQL
        # serves concurrent transactions itself
        self.turns = SqliteTurns(sqlite_read_slots) if self.dialect == "sqlite" else None

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._write_turn(), self._write.begin() as session:
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read_turn(), self._read() as session, session.begin():
            yield session

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A bare connection for a statement or two on the hot path, without a session (it
        takes a read's turn)."""
        with self._read_turn(), self.engine.connect() as conn:
            yield conn

    def _read_turn(self) -> AbstractContextManager[None]:
        return self.turns.read() if self.turns else nullcontext()

    def _write_turn(self) -> AbstractContextManager[None]:
        return self.turns.write() if self.turns else nullcontext()

    def wait_until_reachable(self, timeout_s: float,
                             waiting: Callable[[str, float], object] = lambda *_: None) -> None:
        """Return once the database answers; retry with backoff for `timeout_s`, telling
        `waiting` why and for how long, then raise DatabaseUnreachable."""
        deadline = time.monotonic() + timeout_s
        delay = 0.5
        while True:
            try:
                with self.engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
                return
            except DBAPIError as exc:
                if not transient(exc):
                    raise
                why = str(exc.orig or exc).strip().splitlines()[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DatabaseUnreachable(
                        f"the database at {safe_url(self.url)} did not answer within "
                        f"{timeout_s:g} s ({why}); start it, or check GPULEASE_DATABASE_URL "
                        "(GPULEASE_DB_WAIT_S sets the wait)") from None
                waiting(why, min(delay, left))
                time.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)

    def migrate(self) -> None:
        """Apply every Alembic migration (idempotent; run at start-up), one process at a
        time: under a PostgreSQL advisory lock held by the migrating transaction, or a
        file lock beside the SQLite file. Several processes starting at once: one
        migrates, the others wait and find nothing left to do. A database newer than this
        code is refused (SchemaTooNew), untouched."""
        with self._migration_lock(), self.engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                # SQLite's batch migrations rebuild a table (copy, drop, rename): with rows
                # referring to it, a drop under enforced foreign keys fails. Off for the
                # migration (outside its transaction, where the pragma takes effect), the
                # references checked before it commits, on again after.
                conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                    "PRAGMA foreign_keys=OFF")
            try:
                with conn.begin():
                    if conn.dialect.name == "postgresql":
                        # Another process may be migrating for longer than a session's
                        # lock_timeout: wait for it as long as a migration may take, and
                        # let the migration's own statements (an index on a large table)
                        # run past the statement_timeout meant for requests.
                        conn.execute(text(f"SET LOCAL lock_timeout = '{MIGRATION_WAIT}'"))
                        conn.execute(text("SET LOCAL statement_timeout = 0"))
                        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                     {"key": MIGRATION_LOCK_KEY})
                    current, head = _revisions(conn, self.url)
                    _refuse_newer(current, head)
                    if current != head:  # at head: nothing to load or to run
                        from alembic import command

                        cfg = alembic_config(self.url)
                        cfg.attributes["connection"] = conn
                        command.upgrade(cfg, "head")
                    if sqlite:
                        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                        if broken:
                            raise RuntimeError(f"the migration left rows referring to "
                                               f"nothing: {broken[:5]}; nothing was changed")
            finally:
                if sqlite:
                    conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                        "PRAGMA foreign_keys=ON")

    def schema(self) -> tuple[str | None, str]:
        """(the database's migration, this code's latest); raises SchemaTooNew when the
        database's is one this code does not know."""
        with self.engine.connect() as conn:
            current, head = _revisions(conn, self.url)
        _refuse_newer(current, head)
        return current, head

    def require_current(self) -> None:
        """For processes that do not migrate at start: the schema must be this code's."""
        current, head = self.schema()
        if current != head:
            raise SchemaBehind(
                f"the database is at migration {current or 'none'}, this gpulease needs "
                f"{head}: run `gpulease migrate` (or set GPULEASE_MIGRATE_AT_START=true)")

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        path = sqlite_file(self.url)
        if path is None:
            yield
            return
        import fcntl

        with open(f"{path}.migrate.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def unwritable(self) -> str | None:
        """Why a write would fail now, when that can be told without writing (`/healthz`):
        a SQLite file on a read-only or full file system, a PostgreSQL standby or a
        read-only default; None: writable as far as can be seen. Its one query also
        proves the database answers (it raises when not)."""
        if self.dialect == "sqlite":
            with self.read() as s:
                s.execute(text("SELECT 1"))
            folder = Path(self.url.removeprefix("sqlite:///").split("?", 1)[0]).parent
            found = os.statvfs(folder)
            if found.f_flag & os.ST_RDONLY:
                return f"the database's file system ({folder}) is read-only"
            free = found.f_bavail * found.f_frsize
            if free < FULL_BELOW_BYTES:
                return (f"the database's disk ({folder}) is full: {free // 2**20} MiB free; "
                        "free some space")
            return None
        with self.engine.connect() as conn:
            standby, read_only = conn.execute(text(
                "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')"
            )).one()
        if standby:
            return ("the database is a read-only standby; point GPULEASE_DATABASE_URL at the "
                    "primary")
        if read_only == "on":
            return "the database's transactions are read-only (default_transaction_read_only)"
        return None

    def dispose(self) -> None:
        self.engine.dispose()


MIGRATION_LOCK_KEY = 0x67706C6D  # "gplm": the advisory lock migrations take
MIGRATION_WAIT = "15min"  # how long a starting process waits for another's migration


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer gpulease than this one."""


class SchemaBehind(RuntimeError):
    """The database needs migrations this process is not to apply itself."""


def sqlite_file(url: str) -> str | None:
    if not url.startswith("sqlite") or ":memory:" in url:
        return None
    return url.split(":///", 1)[-1].split("?", 1)[0] or None


@functools.cache
def _scripts() -> Any:
    """The migrations shipped with this code (read once per process)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def _revisions(conn: Any, url: str) -> tuple[str | None, str]:
    from alembic.runtime.migration import MigrationContext

    quiet = logging.getLogger("alembic.runtime.migration")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # its two INFO lines on every /readyz say nothing
    try:
        current = MigrationContext.configure(conn).get_current_revision()
    finally:
        quiet.setLevel(level)
    head = _scripts().get_current_head()
    assert head is not None
    return current, head


def _refuse_newer(current: str | None, head: str) -> None:
    if current is None:
        return
    from alembic.util.exc import CommandError

    try:
        known = _scripts().get_revision(current)
    except CommandError:
        known = None
    if known is None:
        raise SchemaTooNew(
            f"the database is at migration {current}, newer than this gpulease knows (up "
            f"to {head}): run the release that migrated it (or a newer one); this process "
            "changes nothing")


def safe_url(url: str) -> str:
    """The URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        userinfo, host = rest.split("@", 1)
        if ":" in userinfo:
            return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return url


def alembic_config(url: str) -> Config:
    """Alembic is imported here, when a process migrates or checks its schema, not by
    every command that merely imports the database module (a CLI call is ~0.2 s faster)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg
