"""The GPU backend interface: NVML on GPU servers, a simulation everywhere else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpulease.domain.fleet.telemetry import GpuSample


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_mib: int
    pci_bus_id: str | None = None
    pcie_gen: int | None = None  # current link generation
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink_links: int = 0
    nvlink_up: int = 0
    serial: str | None = None


class GpuBackend(Protocol):
    simulated: bool
    device_type: str  # PyTorch's device type for the checks: "cuda", or "npu" (Ascend)

    def devices(self) -> list[GpuInfo]: ...

    def sample(self) -> list[GpuSample]:
        """One sweep: a sample per GPU, with XID events since the previous sweep."""
        ...

    def driver_version(self) -> str | None: ...

    def cuda_version(self) -> str | None: ...

    def close(self) -> None: ...


class BackendUnavailable(RuntimeError):
    """The asked-for backend cannot run here (no NVML, no GPU)."""
