"""Fixtures: every database test runs on SQLite and on the local PostgreSQL (a fresh
schema per test). Set GPULEASE_TEST_PG to point elsewhere."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import uvicorn
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fastapi import FastAPI

from gpulease.api.app import create_app
from gpulease.cli.client import Client
from gpulease.compose import make_platform
from gpulease.demo import seed_demo_fleet
from gpulease.domain.accounts import Principal
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.settings import Settings
from gpulease.worker.runner import Worker

PG_URL = os.environ.get("GPULEASE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SECRET = Fernet.generate_key().decode()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs -n auto --dist loadgroup): the tests that use
    the Docker engine run on one worker, one at a time, since they clean up the engine's
    tenant networks that nothing uses (one being made by another test looks unused)."""
    for item in items:
        if "engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("docker-engine"))


def _pg_dsn() -> str:
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
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_URL} is not reachable ({exc}); start it or set "
                    "GPULEASE_TEST_PG")
    try:
        yield pg_url_for(schema)
    finally:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database_url(request.param, tmp_path) as url:
        yield url


def listing_app() -> FastAPI:
    """The app over a stand-in platform: enough to list its routes and its document."""
    from unittest.mock import MagicMock

    platform = MagicMock()
    platform.settings.max_body_bytes = 1 << 20
    return create_app(platform)


def make_settings(db_url: str, data_dir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = dict(
        data_dir=data_dir, database_url=db_url, secret_key=SECRET, demo_delay_s=0.0,
        poll_interval_s=0.01, backoff_base_s=0.01, backoff_max_s=0.05, lock_ttl_s=10.0,
        stage_timeout_s=60.0, max_attempts=4, simulated_hardware=True,
    )
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


_MIGRATED: dict[str, str] = {}  # kind -> a migrated SQLite file, or PostgreSQL's DDL


def _migrated_template(kind: str) -> str:
    """One database per session migrated to head the usual way (Alembic), kept as a file
    (SQLite) or as pg_dump's script (PostgreSQL), so that each test's fresh database starts
    as a copy instead of running every migration again (0.3 s and 0.6 s a test). The
    migrations themselves are tested from an empty database (test_migrations.py)."""
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
                               "-n", schema, _pg_dsn()], capture_output=True, text=True,
                              check=True, timeout=120).stdout
    lines = [ln for ln in dump.splitlines()  # psql's meta-commands and the schema itself
             if not ln.startswith("\\") and not ln.startswith(f"CREATE SCHEMA {schema}")]
    _MIGRATED[kind] = "\n".join(lines).replace(f"{schema}.", "{schema}.")
    return _MIGRATED[kind]


def start_migrated(db_url: str) -> None:
    """The test's fresh database made a copy of the session's migrated one."""
    if db_url.startswith("sqlite:///"):
        shutil.copyfile(_migrated_template("sqlite"), db_url.removeprefix("sqlite:///"))
        return
    schema = schema_of(db_url)
    script = _migrated_template("postgresql").replace("{schema}.", f"{schema}.")
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(script.encode())


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    start_migrated(db_url)
    p = make_platform(make_settings(db_url, tmp_path / "data"))
    p.db.migrate()  # at head already: checks, and does nothing
    yield p
    # an app without its lifespan (TestClient outside `with`) leaves its audit writer's
    # queue: drained before the drop
    p.close()


@pytest.fixture
def fleet(platform: Platform) -> Platform:
    """The platform with the demo fleet: two simulated nodes per offer."""
    seed_demo_fleet(platform, 2)
    return platform


@pytest.fixture
def worker(platform: Platform) -> Worker:
    return Worker(platform, owner="test-worker")


class TenantCtx:
    def __init__(self, principal: Principal, token: str, tenant_id: str) -> None:
        self.principal, self.token, self.tenant_id = principal, token, tenant_id


def new_tenant(p: Platform, name: str | None = None, funds: str = "100000000") -> TenantCtx:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    created = accounts.create_tenant(p, name, f"{name}@example.com", "Admin")
    fund(p, created.tenant.id, funds)
    principal = accounts.authenticate(p, created.token.token)
    return TenantCtx(principal, created.token.token, created.tenant.id)


@pytest.fixture
def tenant(platform: Platform) -> TenantCtx:
    return new_tenant(platform)


@pytest.fixture
def operator(platform: Platform) -> TenantCtx:
    _, token = accounts.create_operator(platform, f"op-{uuid.uuid4().hex[:6]}@example.com", "Op")
    return TenantCtx(accounts.authenticate(platform, token.token), token.token, "")


def ssh_key(comment: str = "test") -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    blob = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{blob.decode()} {comment}"


@pytest.fixture
def key() -> str:
    return ssh_key()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    def __init__(self, p: Platform) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(p), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def client(self, token: str | None) -> Client:
        return Client(self.url, token)


@pytest.fixture
def server(platform: Platform) -> Iterator[LiveServer]:
    with LiveServer(platform) as live:
        yield live


def fund(p: Platform, tenant_id: str, amount: str = "100000000", reference: str = "") -> None:
    """Put money in a tenant's wallet (an operator's top-up), so orders can hold it."""
    from decimal import Decimal

    from gpulease.domain.accounts import Principal, Role
    from gpulease.services.money import wallet

    operator = Principal(user_id="test-operator", tenant_id=None, role=Role.OPERATOR)
    wallet.top_up(p, operator, tenant_id, Decimal(amount),
                  reference or f"test funding {tenant_id}")
