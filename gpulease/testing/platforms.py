"""Platforms for tests and benches: on a fresh SQLite file, or on a fresh schema of the
local PostgreSQL (GPULEASE_TEST_PG), started as a copy of one database migrated once per
process (the migrations themselves are tested from an empty database), with the demo's
simulated hardware and quick retries."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from cryptography.fernet import Fernet

from gpulease.compose import make_platform
from gpulease.platform import Platform
from gpulease.settings import Settings

PG_URL = os.environ.get("GPULEASE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SECRET = Fernet.generate_key().decode()  # one per process, as one installation's


class DatabaseMissing(RuntimeError):
    """The local PostgreSQL did not answer."""


def pg_dsn() -> str:
    return PG_URL.replace("postgresql+psycopg://", "postgresql://")


def pg_url_for(schema: str) -> str:
    # (synchronous_commit=off here made the PostgreSQL money machine 5 times slower, not
    # faster: tried and measured, 141 s against 25 s)
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


def schema_of(url: str) -> str:
    return url.split("search_path%3D", 1)[1].split("%20", 1)[0]


@contextmanager
def database_url(kind: str, tmp_path: Path) -> Iterator[str]:
    """A fresh SQLite file, or a fresh schema on the local PostgreSQL (dropped after)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpulease.db'}"
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as exc:
        raise DatabaseMissing(f"PostgreSQL at {PG_URL} is not reachable ({exc}); start it "
                              "or set GPULEASE_TEST_PG") from None
    try:
        yield pg_url_for(schema)
    finally:
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def make_settings(db_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """A test's settings: its database, the process's key, the simulated hardware, no
    delays, quick retries and a lock TTL long enough for a busy machine."""
    values: dict[str, Any] = dict(
        data_dir=data_dir, database_url=db_url, secret_key=SECRET, demo_delay_s=0.0,
        poll_interval_s=0.01, backoff_base_s=0.01, backoff_max_s=0.05, lock_ttl_s=10.0,
        stage_timeout_s=60.0, max_attempts=4, simulated_hardware=True,
    )
    values.update(overrides)
    return Settings(**values)


_MIGRATED: dict[str, str] = {}  # kind -> a migrated SQLite file, or PostgreSQL's DDL


def _migrated_template(kind: str) -> str:
    """One database per process migrated to head the usual way (Alembic), kept as a file
    (SQLite) or as pg_dump's script (PostgreSQL), so that each test's fresh database starts
    as a copy instead of running every migration again (0.3 s and 0.6 s a test)."""
    if kind in _MIGRATED:
        return _MIGRATED[kind]
    root = Path(tempfile.mkdtemp(prefix="gpulease-template-"))
    atexit.register(shutil.rmtree, root, True)
    if kind == "sqlite":
        url = f"sqlite:///{root / 'template.db'}"
        p = make_platform(make_settings(url, root / "data"))
        p.db.migrate()
        p.db.dispose()
        _MIGRATED[kind] = str(root / "template.db")
        return _MIGRATED[kind]
    with database_url("postgresql", root) as url:
        schema = schema_of(url)
        p = make_platform(make_settings(url, root / "data"))
        p.db.migrate()
        p.db.dispose()
        dump = subprocess.run(["pg_dump", "--no-owner", "--no-privileges", "--inserts",
                               "-n", schema, pg_dsn()], capture_output=True, text=True,
                              check=True, timeout=120).stdout
    lines = [ln for ln in dump.splitlines()  # psql's meta-commands and the schema itself
             if not ln.startswith("\\") and not ln.startswith(f"CREATE SCHEMA {schema}")]
    _MIGRATED[kind] = "\n".join(lines).replace(f"{schema}.", "{schema}.")
    return _MIGRATED[kind]


def start_migrated(db_url: str) -> None:
    """The test's fresh database made a copy of the process's migrated one."""
    if db_url.startswith("sqlite:///"):
        shutil.copyfile(_migrated_template("sqlite"), db_url.removeprefix("sqlite:///"))
        return
    schema = schema_of(db_url)
    script = _migrated_template("postgresql").replace("{schema}.", f"{schema}.")
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(script.encode())


def machine_platform(db: str, **overrides: Any) -> tuple[Platform, str | None]:
    """A migrated platform for a hypothesis machine (one per example): SQLite in a temp
    directory, or a fresh PostgreSQL schema (returned, for `drop_schema`)."""
    data = Path(tempfile.mkdtemp())
    schema = None
    if db == "sqlite":
        url = f"sqlite:///{data / 'm.db'}"
    else:
        schema = f"m_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_dsn(), autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
        url = pg_url_for(schema)
    start_migrated(url)  # the caller's migrate() finds it at head
    p = make_platform(make_settings(url, data, **overrides))
    return p, schema


def drop_schema(p: Platform, schema: str | None) -> None:
    p.db.dispose()
    if schema:
        with psycopg.connect(pg_dsn(), autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')
