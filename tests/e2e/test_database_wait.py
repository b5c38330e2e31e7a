"""`serve` and `worker` started before their database: they wait for it with backoff, and
say in one line when it never comes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from gpulease.testing.platforms import PG_URL, SECRET
from gpulease.testing.servers import free_port
from tests.drivers.redfish.proxy import FaultProxy

pytestmark = pytest.mark.slow


def gpulease(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpulease.cli.main", *args],
                            env=os.environ | {"GPULEASE_SECRET_KEY": SECRET} | env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_worker_without_its_database_gives_up_in_one_line(tmp_path: Path) -> None:
    dead = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"
    started = time.monotonic()
    proc = gpulease(["worker", "--data-dir", str(tmp_path)],
                    {"GPULEASE_DATABASE_URL": dead, "GPULEASE_DB_WAIT_S": "2"})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert time.monotonic() - started < 20
    assert "waiting for the database" in err  # it retried, with backoff
    assert "did not answer within 2 s" in " ".join(err.split())
    assert "Traceback" not in err + out


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"w_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def test_serve_waits_for_a_database_that_comes_up_later(tmp_path: Path, schema: str) -> None:
    pg_port = int(PG_URL.rsplit(":", 1)[1].split("/", 1)[0])
    late_port, api_port = free_port(), free_port()
    url = (f"postgresql+psycopg://postgres@127.0.0.1:{late_port}/test"
           f"?options=-csearch_path%3D{schema}")
    proc = gpulease(["serve", "--data-dir", str(tmp_path), "--port", str(api_port)],
                    {"GPULEASE_DATABASE_URL": url, "GPULEASE_DB_WAIT_S": "60"})
    said: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: said.extend(iter(proc.stderr.readline, "")),
                              daemon=True)
    reader.start()
    proxy = None
    try:
        deadline = time.monotonic() + 30
        while not any("waiting for the database" in line for line in said):
            assert time.monotonic() < deadline and proc.poll() is None, said
            time.sleep(0.1)
        proxy = FaultProxy(pg_port, port=late_port)  # the database "comes up"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=2).status_code \
                        == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "serve never came up"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(20)
        reader.join(5)
        if proxy is not None:
            proxy.close()
    assert "Traceback" not in "".join(said), said
