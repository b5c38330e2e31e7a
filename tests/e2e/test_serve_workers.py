"""`gpulease serve --workers 2` on PostgreSQL: two API processes share the port and the
database (migrated once, before they start); SIGHUP replaces both, one at a time, while a
client keeps calling, and not one call fails; SIGTERM ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from gpulease.compose import make_platform
from gpulease.services.accounts import identity as accounts
from gpulease.testing.platforms import SECRET, database_url, make_settings
from gpulease.testing.servers import free_port

pytestmark = pytest.mark.slow


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(c) for c in text)
    # uvicorn's supervisor also keeps multiprocessing's resource tracker: only API processes
    return {c for c in found if "multiprocessing.spawn" in _cmdline(c)}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:  # it ended meanwhile
        return ""


def test_two_api_processes_restart_one_at_a_time_without_a_failed_call(tmp_path: Path
                                                                        ) -> None:
    with database_url("postgresql", tmp_path) as url:
        p = make_platform(make_settings(url, tmp_path / "data"))
        p.db.migrate()
        _, token = accounts.create_operator(p, "op@example.com", "Op")
        p.db.dispose()
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulease.cli.main", "serve", "--data-dir",
             str(tmp_path / "data"), "--port", str(port), "--workers", "2"],
            env=os.environ | {"GPULEASE_SECRET_KEY": SECRET, "GPULEASE_DATABASE_URL": url,
                              "GPULEASE_SIMULATED_HARDWARE": "true",
                              # the caller below calls as fast as it can: not a limit test
                              "GPULEASE_RATE_LIMIT_PER_TOKEN_PER_MIN": str(10**9)},
            # its access log is a line per call: to a file, not a pipe nobody drains
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "serve.log").open("w"), text=True)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token.token}"}
        try:
            for _ in range(300):  # bounded: 30 s
                try:
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            for _ in range(100):  # both processes up
                if len(children(proc.pid)) >= 2:
                    break
                time.sleep(0.1)
            before = children(proc.pid)
            assert len(before) == 2, before
            assert all(httpx.get(f"{base}/api/v1/me", headers=headers).status_code == 200
                       for _ in range(20))

            failures: list[str] = []
            calls = [0]
            stop = threading.Event()

            def keep_calling() -> None:
                # An idle keep-alive connection an old process closes while the request is
                # on its way is reset; like browsers and nginx (proxy_next_upstream), the
                # client sends that idempotent request once more, on a new connection. A
                # failed call is one that fails again, or answers other than 200.
                with httpx.Client(timeout=10) as client:
                    while not stop.is_set():
                        for attempt in (1, 2):
                            try:
                                r = client.get(f"{base}/api/v1/me", headers=headers)
                                if r.status_code != 200:
                                    failures.append(str(r.status_code))
                                break
                            except httpx.TransportError as exc:
                                if attempt == 2:
                                    failures.append(repr(exc))
                        calls[0] += 1

            caller = threading.Thread(target=keep_calling)
            caller.start()
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGHUP)
            for _ in range(900):  # bounded: 90 s for both to be replaced (each old one
                # drains its keep-alive connections first: up to 30 s on a slow machine)
                now = children(proc.pid)
                if len(now) == 2 and not (now & before):
                    break
                time.sleep(0.1)
            time.sleep(0.5)
            stop.set()
            caller.join(15)
            assert not (children(proc.pid) & before)  # both replaced
            assert failures == [] and calls[0] > 20, (failures[:5], calls[0])
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        assert proc.returncode in (0, 128 + signal.SIGTERM, -signal.SIGTERM)
