"""`gpulease up` in a subprocess (the demo fleet, simulated hardware, no delays) and the CLI
against it, as the README runs them: shared by the end-to-end tests that follow it."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpulease.testing.servers import free_port


class Up:
    def __init__(self, data_dir: Path, port: int, proc: subprocess.Popen[str]) -> None:
        self.data_dir, self.port, self.proc = data_dir, port, proc
        self.url = f"http://127.0.0.1:{port}"

    def env(self, token_file: str) -> dict[str, str]:
        token = (self.data_dir / token_file).read_text().strip()
        return os.environ | {"GPULEASE_URL": self.url, "GPULEASE_TOKEN": token,
                             "COLUMNS": "200"}


@contextlib.contextmanager
def running_up(tmp_path: Path) -> Iterator[Up]:
    """`gpulease up` on a free port with its data in `tmp_path`, stopped at the end."""
    port = free_port()
    data = tmp_path / "gl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", "up", "--bmc", "simulated", "--data-dir",
         str(data), "--port", str(port), "--demo-delay", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=os.environ | {"GPULEASE_POLL_INTERVAL_S": "0.05", "COLUMNS": "200"},
    )
    url = f"http://127.0.0.1:{port}"
    # Its own listening line first (printed once the tokens are written): a /healthz alone
    # could be answered by another test's server that took the port in between (`up` then
    # exits, saying "127.0.0.1:<port> is in use", without the URL).
    printed = b""
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while url.encode() not in printed and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:  # it exited
                break
            printed += chunk
    healthy = False
    while url.encode() in printed and not healthy and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            healthy = httpx.get(f"{url}/healthz").status_code == 200
        if not healthy:
            time.sleep(0.1)
    if not healthy:
        proc.kill()
        pytest.fail("gpulease up did not start: " + printed.decode(errors="replace"))
    yield Up(data, port, proc)
    proc.send_signal(signal.SIGINT)
    proc.wait(15)


def cli(up: Up, *args: str, token: str = "demo-tenant.token") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulease.cli.main", *args],
                          env=up.env(token), capture_output=True, text=True, timeout=60)
