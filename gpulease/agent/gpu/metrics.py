"""Prometheus text exposition with dcgm-exporter's metric names and labels, so a provider's
existing Prometheus rules and Grafana dashboards work unchanged: every counter of its
default list that NVML can read (etc/default-counters.csv; the vGPU licence status is left
out on bare metal), plus the ECC, NVLink CRC and link-state series it lists but leaves
off, under its label set (gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION). docs/agent.md says what differs.

Written out by hand rather than through prometheus_client's registry: that library appends
`_total` to every counter's name, and dcgm-exporter's counters (e.g.
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) carry no such suffix. The tests parse the output
with prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpulease.domain.fleet.telemetry import GpuSample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # gauge | counter
    help: str
    value: Callable[[GpuSample], float | int | bool | None]


FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
          lambda s: s.sm_clock_mhz),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
          lambda s: s.mem_clock_mhz),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
          lambda s: s.memory_temp_c),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda s: s.gpu_temp_c),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda s: s.power_w),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
          "Total energy consumption since boot (in mJ).", lambda s: s.energy_mj),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
          lambda s: s.gpu_util_pct),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
          lambda s: s.mem_copy_util_pct),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
          lambda s: s.enc_util_pct),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
          lambda s: s.dec_util_pct),
    Field("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter",
          "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
          lambda s: s.pcie_tx_kbps),
    Field("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter",
          "Total number of bytes received through PCIe RX (in KB) via NVML.",
          lambda s: s.pcie_rx_kbps),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
          lambda s: s.fb_free_mib),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
          lambda s: s.fb_used_mib),
    Field("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
          "Current clock event (throttle) reasons, NVML bitmask.",
          lambda s: s.clocks_event_reasons),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
          lambda s: s.last_xid),
    Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
          "Total number of single-bit volatile ECC errors.", lambda s: s.ecc_sbe_volatile),
    Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
          "Total number of double-bit volatile ECC errors.", lambda s: s.ecc_dbe_volatile),
    Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for correctable errors",
          lambda s: s.remapped_rows_correctable),
    Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for uncorrectable errors",
          lambda s: s.remapped_rows_uncorrectable),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
          lambda s: s.row_remap_failure),
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
          lambda s: s.pcie_replays),
    Field("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter",
          "Total number of NVLink flow-control CRC errors.", lambda s: s.nvlink_crc_errors),
    Field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes",
          lambda s: s.nvlink_bytes_total),
)


# Ascend NPUs: the names of Huawei's npu-exporter (MindX DL) where it has them, so its
# users' rules and dashboards read these; ECC counters under our own prefix.
NPU_FIELDS: tuple[Field, ...] = (
    Field("npu_chip_info_temperature", "gauge", "NPU temperature (in C).",
          lambda s: s.gpu_temp_c),
    Field("npu_chip_info_power", "gauge", "NPU power (in W).", lambda s: s.power_w),
    Field("npu_chip_info_utilization", "gauge", "AI Core utilization (in %).",
          lambda s: s.gpu_util_pct),
    Field("npu_chip_info_hbm_used_memory", "gauge", "HBM used (in MB).",
          lambda s: s.fb_used_mib),
    Field("npu_chip_info_hbm_total_memory", "gauge", "HBM total (in MB).",
          lambda s: (s.fb_used_mib + s.fb_free_mib)
          if s.fb_used_mib is not None and s.fb_free_mib is not None else None),
    Field("npu_chip_info_health_status", "gauge", "NPU health (1 = OK).",
          lambda s: None if s.health is None else s.health == "OK"),
    Field("gpulease_npu_hbm_ecc_single_bit_errors", "counter",
          "HBM single-bit ECC errors (npu-smi info -t ecc).", lambda s: s.ecc_sbe_volatile),
    Field("gpulease_npu_hbm_ecc_double_bit_errors", "counter",
          "HBM double-bit ECC errors (npu-smi info -t ecc).", lambda s: s.ecc_dbe_volatile),
)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float | int | bool) -> str:
    return repr(float(value))


@dataclass(frozen=True)
class Host:
    """The node a page describes: its name, the GPU backend that read it, the driver and
    CUDA versions it reports, and the GPUs' PCI bus ids by index (dcgm-exporter's
    `pci_bus_id`)."""

    hostname: str
    backend: str
    driver_version: str | None = None
    cuda_version: str | None = None
    bus_ids: Mapping[int, str] | None = None


def render(samples: Sequence[GpuSample], host: Host, sweep_seconds: float | None = None
           ) -> str:
    """The /metrics page for the latest sample of each GPU on `host`. NPUs (samples that
    carry a health, as npu-smi reports) get npu-exporter's names and labels instead."""
    hostname, backend, driver_version = host.hostname, host.backend, host.driver_version
    bus_ids = host.bus_ids
    npu = any(s.health is not None for s in samples)
    if npu:
        base = [{"id": str(s.index), "model_name": s.name, "UUID": s.uuid,
                 "pci_bus_id": (bus_ids or {}).get(s.index, ""), "Hostname": hostname}
                for s in samples]
    else:
        base = [{"gpu": str(s.index), "UUID": s.uuid,
                 "pci_bus_id": (bus_ids or {}).get(s.index, ""),
                 "device": f"nvidia{s.index}", "modelName": s.name, "Hostname": hostname,
                 "DCGM_FI_DRIVER_VERSION": driver_version or ""} for s in samples]
    lines: list[str] = []
    for f in NPU_FIELDS if npu else FIELDS:
        rows = [(labels, v) for labels, s in zip(base, samples, strict=True)
                if (v := f.value(s)) is not None]
        if not rows:
            continue  # a field no GPU reports is left out, as dcgm-exporter does
        lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.kind}"]
        lines += [f"{f.name}{_labels(labels)} {_number(v)}" for labels, v in rows]
    links = [(labels, k, up) for labels, s in zip(base, samples, strict=True)
             for k, up in enumerate(s.nvlink_up)]
    if links:
        lines += ["# HELP DCGM_FI_DEV_NVLINK_LINK_STATUS NVLink link state (1 = up).",
                  "# TYPE DCGM_FI_DEV_NVLINK_LINK_STATUS gauge"]
        lines += [f"DCGM_FI_DEV_NVLINK_LINK_STATUS{_labels({**labels, 'link': str(k)})} "
                  f"{_number(up)}" for labels, k, up in links]
    simulated = any(s.simulated for s in samples) or backend == "simulated"
    info = {"Hostname": hostname, "backend": backend, "simulated": str(simulated).lower(),
            "driver_version": driver_version or "", "cuda_version": host.cuda_version or ""}
    lines += ["# HELP gpulease_agent_info The agent and its GPU backend; "
              "simulated=\"true\" means no real GPU was read.",
              "# TYPE gpulease_agent_info gauge", f"gpulease_agent_info{_labels(info)} 1.0",
              "# HELP gpulease_agent_gpus GPUs the agent reads.",
              "# TYPE gpulease_agent_gpus gauge", f"gpulease_agent_gpus {_number(len(samples))}"]
    if sweep_seconds is not None:
        lines += ["# HELP gpulease_agent_sweep_seconds Time the last sample sweep took.",
                  "# TYPE gpulease_agent_sweep_seconds gauge",
                  f"gpulease_agent_sweep_seconds {_number(sweep_seconds)}"]
    return "\n".join(lines) + "\n"
