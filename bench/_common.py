"""Shared bench helpers: a platform on SQLite or a fresh PostgreSQL schema, percentiles, a
media server and the platform's API on loopback."""

from __future__ import annotations

import functools
import http.server
import os
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import uvicorn
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from sqlalchemy import text

from gpulease.api.app import create_app
from gpulease.compose import make_platform
from gpulease.platform import Platform
from gpulease.settings import Settings

PG_URL = os.environ.get("GPULEASE_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def bench_platform(db: str, **overrides: object) -> Iterator[Platform]:
    data = Path(tempfile.mkdtemp(prefix="gpulease-bench-"))
    schema = None
    if db == "sqlite":
        url = f"sqlite:///{data / 'bench.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    values: dict[str, object] = dict(
        data_dir=data, database_url=url, secret_key=Fernet.generate_key().decode(),
        demo_delay_s=0.0, poll_interval_s=0.01, lock_ttl_s=30.0, simulated_hardware=True,
        # counted as ever (their cost is measured) but never refused mid-bench
        rate_limit_per_token_per_min=10**9, rate_limit_anonymous_per_min=10**9,
    )
    values.update(overrides)
    p = make_platform(Settings(**values))  # type: ignore[arg-type]
    p.db.migrate()
    try:
        yield p
    finally:
        p.db.dispose()
        if schema:
            with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in samples_s]
    return {"p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3),
            "mean_ms": round(statistics.fmean(ms), 3), "n": len(ms)}


def raw_write_txn_s(p: Platform, rounds: int = 200) -> list[float]:
    """The database's own cost of one small write transaction, through the same engine."""
    with p.db.write() as s:
        s.execute(text(
            "CREATE TABLE IF NOT EXISTS bench_counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        s.execute(text("DELETE FROM bench_counter"))
        s.execute(text("INSERT INTO bench_counter (id, n) VALUES (1, 0)"))
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        with p.db.write() as s:
            s.execute(text("UPDATE bench_counter SET n = n + 1 WHERE id = 1"))
        out.append(time.perf_counter() - t)
    return out


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def ssh_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode() + " bench"


def fund(p: Platform, tenant_id: str) -> None:
    """A credit limit large enough that no bench order waits on money."""
    from decimal import Decimal

    from gpulease.domain.accounts import Principal, Role
    from gpulease.services.money import wallet

    operator = Principal(user_id="bench", tenant_id=None, role=Role.OPERATOR)
    wallet.set_credit_limit(p, operator, tenant_id, Decimal("100000000000"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def media_server() -> tuple[http.server.ThreadingHTTPServer, str]:
    """A media server on 127.0.0.1 with the catalog's image and the agent ramdisk (1 KiB
    each): what a BMC's virtual media is pointed at; (server, its URL)."""
    images = Path(tempfile.mkdtemp())
    for name in ("ubuntu22.04-cuda12.4-pytorch2.5.iso", "agent-ramdisk.iso"):
        (images / name).write_bytes(b"x" * 1024)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(images)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def serve_api(p: Platform) -> uvicorn.Server:
    """The platform's API on a free loopback port, in a thread, and `p`'s public URL set to
    it (BMCs fetch config drives from it); `.should_exit = True` stops it."""
    port = free_port()
    api = uvicorn.Server(uvicorn.Config(create_app(p), host="127.0.0.1", port=port,
                                        log_level="warning"))
    threading.Thread(target=api.run, daemon=True).start()
    while not api.started:  # bounded by uvicorn's start
        time.sleep(0.01)
    p.settings.public_url = f"http://127.0.0.1:{port}"
    return api
