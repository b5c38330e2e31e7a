"""The platform's embedded registry (gpulease/drivers/registry.py: Debian's docker-registry)
in the tests, or a skip where it is not installed (CI installs it and fails instead)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpulease.drivers.registry import available, start_registry


@contextmanager
def running_registry(root: Path) -> Iterator[str]:
    """host:port of a registry serving from `root`."""
    if not available():
        if os.environ.get("GPULEASE_REQUIRE_DOCKER"):
            pytest.fail("docker-registry is missing (.ci/run installs Debian's package)")
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    registry = start_registry(root)
    try:
        yield registry.address
    finally:
        registry.stop()
