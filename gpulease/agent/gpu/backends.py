"""Opening a GPU backend by name: NVML on NVIDIA servers, npu-smi on Ascend servers, the
simulation everywhere else."""

from __future__ import annotations

from gpulease.agent.gpu.backend import BackendUnavailable, GpuBackend
from gpulease.agent.gpu.npu_smi import NpuSmiBackend
from gpulease.agent.gpu.nvml import NvmlBackend
from gpulease.agent.gpu.simulated import SimulatedGpus, parse_faults


def open_backend(name: str, gpus: int = 8, model: str = "h100-80g",
                 faults: tuple[str, ...] = ()) -> GpuBackend:
    """`nvml`, `npu-smi`, `simulated`, or `auto` (NVML where it loads, then npu-smi, else
    simulated)."""
    if name in ("nvml", "auto"):
        try:
            return NvmlBackend()
        except BackendUnavailable:
            if name == "nvml":
                raise
    if name in ("npu-smi", "auto"):
        try:
            return NpuSmiBackend()
        except BackendUnavailable:
            if name == "npu-smi":
                raise
    if name in ("simulated", "auto"):
        return SimulatedGpus(count=gpus, model=model, faults=parse_faults(faults))
    raise ValueError(f"unknown GPU backend {name!r}; use nvml, npu-smi, simulated or auto")
