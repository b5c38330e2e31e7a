"""The embedded registry of `gpulease up` and the tests: Debian's docker-registry
(distribution v2) on loopback, its storage under the data directory, deletes allowed (a
tenant's deleted image goes; `docker-registry garbage-collect` frees its layers). Engines
trust a registry on 127.0.0.0/8 without TLS. A provider points gpulease at its own registry
with GPULEASE_REGISTRY instead; this is the default, not a stand-in."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpulease.data_dir import die_with_parent
from gpulease.drivers.local_service import free_port, stop_process

BINARY = "docker-registry"


def available() -> bool:
    return shutil.which(BINARY) is not None


@dataclass
class EmbeddedRegistry:
    address: str  # host:port, what GPULEASE_REGISTRY names
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        stop_process(self.process)


def start_registry(state: Path, port: int | None = None,
                   timeout_s: float = 30.0) -> EmbeddedRegistry:
    """docker-registry serving from `state`/data on 127.0.0.1:`port`."""
    if not available():
        raise RuntimeError("docker-registry is not installed (Debian: apt-get install "
                           "docker-registry)")
    state.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{port or free_port()}"
    config = state / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "
                      f"{state / 'data'}\n  delete:\n    enabled: true\nhttp:\n"
                      f"  addr: {address}\n")
    out = (state / "registry.log").open("ab")
    proc = subprocess.Popen([BINARY, "serve", str(config)], stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_parent)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited ({proc.returncode}); see {state}")
        try:
            if httpx.get(f"http://{address}/v2/", timeout=1).status_code == 200:
                return EmbeddedRegistry(address, proc)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"docker-registry did not answer within {timeout_s:.0f} s")
