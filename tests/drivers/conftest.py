"""A real Redfish peer: sushy-tools' emulator (fake driver), fresh state per test,
htpasswd auth (bcrypt rounds=4 keeps it fast), on 127.0.0.1; and a local image server."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.conftest import free_port

USER, PASSWORD = "admin", "s3cret-bmc"


@dataclass
class Emulator:
    url: str
    systems: list[str]
    proc: subprocess.Popen[bytes]
    state_dir: Path

    def system_url(self, i: int = 0) -> str:
        return f"{self.url}/redfish/v1/Systems/{self.systems[i]}"

    def get(self, path: str) -> dict:
        r = httpx.get(f"{self.url}{path}", auth=(USER, PASSWORD), timeout=10)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def start_emulator(tmp: Path, count: int = 2, power: str = "Off",
                   nics: list[int] | None = None) -> Emulator:
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (tmp / "htpasswd").write_text(
        f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    systems = [f"5e1f0000-0000-4000-8000-{i:012d}" for i in range(1, count + 1)]
    nics = nics or [1] * count

    def nic_list(i: int) -> str:
        return ", ".join(
            f"{{'mac': '00:5c:52:{n:02x}:{i // 256:02x}:{i % 256:02x}', 'ip': '172.22.{n}.{i}'}}"
            for n in range(1, nics[i - 1] + 1))

    fake = ",\n".join(
        f"{{'uuid': '{u}', 'name': 'gpu-node-{i:02d}', 'power_state': '{power}', "
        f"'external_notifier': False, 'nics': [{nic_list(i)}]}}"
        for i, u in enumerate(systems, start=1))
    (tmp / "emulator.conf").write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(tmp / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(tmp / 'htpasswd')!r}\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = [\n{fake}\n]\n")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "sushy-emulator"), "--fake", "--config",
         str(tmp / "emulator.conf")],
        stdout=subprocess.DEVNULL, stderr=(tmp / "emulator.log").open("w"))
    emu = Emulator(f"http://127.0.0.1:{port}", systems, proc, tmp / "state")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            emu.get("/redfish/v1/Systems")
            return emu
        except httpx.HTTPError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    emu.stop()
    raise RuntimeError("sushy-emulator did not start: " + (tmp / "emulator.log").read_text())


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    emu = start_emulator(tmp_path / "emulator")
    yield emu
    emu.stop()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def image_server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "images"
    root.mkdir()
    (root / "ubuntu22.04-cuda12.4-pytorch2.5.iso").write_bytes(b"ISO" * 1000)
    (root / "agent-ramdisk.iso").write_bytes(b"RAMDISK" * 100)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
