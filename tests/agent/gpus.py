"""Simulated GPUs for the agent's tests, and the H100 offer's acceptance marks."""

from __future__ import annotations

from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.acceptance import GpuSpec, Thresholds


def h100_marks() -> tuple[Thresholds, GpuSpec]:
    catalog = load_catalog(None)
    offer = catalog.offer("h100-80g-x8", "ningxia-1")
    assert offer is not None
    return catalog.acceptance_for(offer)


def sim(*faults: str, count: int = 8) -> SimulatedGpus:
    return SimulatedGpus(count=count, faults=parse_faults(faults), clock=VirtualClock())
