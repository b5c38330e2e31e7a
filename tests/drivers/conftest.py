"""A real Redfish peer: sushy-tools' emulator (fake driver), fresh state per test,
htpasswd auth (bcrypt rounds=4 keeps it fast), on 127.0.0.1; and a local image server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.redfish_emulator import start_emulator as _start
from tests.conftest import free_port
from tests.drivers.docker_engine import engine_or_skip, ensure_test_image

__all__ = ["Emulator", "start_emulator", "USER", "PASSWORD"]

USER, PASSWORD = "admin", "s3cret-bmc"


def start_emulator(tmp: Path, count: int = 2, power: str = "Off",
                   nics: list[int] | None = None, power_delay_s: int | None = 1) -> Emulator:
    """Power changes land within a second: these tests are about what happens around them
    (bench/redfish.py and the demo keep the emulator's random 1–11 s)."""
    return _start(tmp, free_port(), count, power, nics, USER, PASSWORD, power_delay_s)


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


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """The local Docker engine with the tests' image on it (tests/drivers/docker_engine.py)."""
    client = engine_or_skip()
    ensure_test_image(client)
    yield client
    client.close()
