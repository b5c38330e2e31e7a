"""Debian's docker-registry (distribution v2) as the platform's registry in the tests: on
loopback (which Docker engines trust without TLS), deletes allowed, its storage in a
temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

BINARY = "docker-registry"


@contextmanager
def running_registry(root: Path) -> Iterator[str]:
    """host:port of a registry serving from `root`."""
    if shutil.which(BINARY) is None:
        if os.environ.get("GPULEASE_REQUIRE_DOCKER"):
            pytest.fail("docker-registry is missing (.ci/run installs Debian's package)")
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    address = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"  delete:\n    enabled: true\nhttp:\n  addr: {address}\n")
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen([BINARY, "serve", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://{address}/v2/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()}")
            time.sleep(0.1)
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
