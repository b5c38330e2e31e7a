from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.acceptance import GpuSpec, Thresholds


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (.ci/run installs it)")


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[Callable[[int], str]]:
    """Real loop devices over sparse files (root and losetup needed, as on CI)."""
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    _need("losetup")
    made: list[str] = []

    def make(mib: int) -> str:
        backing = tmp_path / f"disk{len(made)}.img"
        with open(backing, "wb") as f:
            f.truncate(mib * 2**20)
        dev = subprocess.run(["losetup", "--find", "--show", str(backing)], check=True,
                             capture_output=True, text=True).stdout.strip()
        made.append(dev)
        return dev

    yield make
    for dev in made:
        subprocess.run(["losetup", "--detach", dev], check=False)


@pytest.fixture
def need_fio() -> None:
    _need("fio")


def h100_marks() -> tuple[Thresholds, GpuSpec]:
    catalog = load_catalog(None)
    offer = catalog.offer("h100-80g-x8", "ningxia-1")
    assert offer is not None
    return catalog.acceptance_for(offer)


def sim(*faults: str, count: int = 8) -> SimulatedGpus:
    return SimulatedGpus(count=count, faults=parse_faults(faults), clock=VirtualClock())
