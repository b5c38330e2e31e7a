"""Engine and transactions for SQLite and PostgreSQL.

SQLite has no row locks, so write transactions start with BEGIN IMMEDIATE: the writer
takes the database's write lock up front and concurrent writers queue on busy_timeout
instead of failing half-way. Reads use a plain deferred BEGIN under WAL.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gpulease.db.limits import SessionLimits

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, pool_size: int = 20, limits: SessionLimits | None = None) -> Engine:
    if url.startswith("sqlite"):
        # Pooled: a connection's PRAGMAs run once, not per transaction.
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 60},
            pool_size=pool_size, max_overflow=20,
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
    engine = create_engine(url, pool_size=pool_size, max_overflow=20, pool_pre_ping=True,
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

    def __init__(self, url: str, pool_size: int = 20, limits: SessionLimits | None = None
                 ) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            _owner_only(Path(url.removeprefix("sqlite:///").split("?", 1)[0]))
        self.engine = make_engine(url, pool_size, limits)
        self.dialect = self.engine.dialect.name
        writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._read = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._write.begin() as session:
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

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
        """Apply every Alembic migration (idempotent; run at start-up)."""
        with self.engine.begin() as conn:
            cfg = alembic_config(self.url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def dispose(self) -> None:
        self.engine.dispose()


def safe_url(url: str) -> str:
    """The URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        userinfo, host = rest.split("@", 1)
        if ":" in userinfo:
            return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return url


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg
