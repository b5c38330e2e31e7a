"""The NVML backend (nvidia-ml-py). A query the GPU or driver does not support reads as
None, never as an error: an RTX 4090 has no ECC and no NVLink, and that is not a fault."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpulease.agent.gpu.backend import BackendUnavailable, GpuInfo
from gpulease.domain.fleet.telemetry import GpuSample

T = TypeVar("T")

try:  # the control plane never needs NVML; the agent's nvml backend does
    import pynvml as nv
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
    nv = None


def _maybe(call: Callable[..., T], *args: Any) -> T | None:
    """call(*args), or None where the GPU or driver does not support it."""
    try:
        return call(*args)
    except nv.NVMLError:
        return None


def _num(value: Any, kind: Callable[[Any], T]) -> T | None:
    return None if value is None else kind(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    simulated = False

    simulated = False
    device_type = "cuda"

    def __init__(self) -> None:
        if nv is None:
            raise BackendUnavailable("nvidia-ml-py is not installed")
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise BackendUnavailable(f"NVML did not load ({exc}); is the NVIDIA driver "
                                     "installed and a GPU present?") from exc
        count = nv.nvmlDeviceGetCount()
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in self._handles]
        self._names = [_text(nv.nvmlDeviceGetName(h)) for h in self._handles]
        self._events = self._register_xids()
        self._last_xid = [0] * count
        self._nvlinks = [self._link_count(h) for h in self._handles]

    def _register_xids(self) -> Any:
        """An event set for XID (critical error) events; None where unsupported."""
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            return None
        for h in self._handles:
            _maybe(nv.nvmlDeviceRegisterEvents, h, nv.nvmlEventTypeXidCriticalError, events)
        return events

    @staticmethod
    def _link_count(handle: Any) -> int:
        links = 0
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            if _maybe(nv.nvmlDeviceGetNvLinkState, handle, link) is None:
                break
            links += 1
        return links

    def devices(self) -> list[GpuInfo]:
        out = []
        for i, h in enumerate(self._handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            pci = _maybe(nv.nvmlDeviceGetPciInfo, h)
            links = self._nvlinks[i]
            up = sum(1 for link in range(links) if _maybe(nv.nvmlDeviceGetNvLinkState, h, link))
            out.append(GpuInfo(
                index=i, name=self._names[i], uuid=self._uuids[i],
                memory_mib=int(mem.total // 2**20),
                pci_bus_id=_text(pci.busId) if pci is not None else None,
                pcie_gen=_num(_maybe(nv.nvmlDeviceGetCurrPcieLinkGeneration, h), int),
                pcie_gen_max=_num(_maybe(nv.nvmlDeviceGetMaxPcieLinkGeneration, h), int),
                pcie_width=_num(_maybe(nv.nvmlDeviceGetCurrPcieLinkWidth, h), int),
                pcie_width_max=_num(_maybe(nv.nvmlDeviceGetMaxPcieLinkWidth, h), int),
                nvlink_links=links, nvlink_up=up,
                serial=_num(_maybe(nv.nvmlDeviceGetSerial, h), _text)))
        return out

    def _drain_xids(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        if self._events is None:
            return found
        for _ in range(1000):  # bounded: a storm of events must not stall the sweep
            try:
                event = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError:
                break
            uuid = _text(nv.nvmlDeviceGetUUID(event.device))
            if uuid in self._uuids:
                found.setdefault(self._uuids.index(uuid), []).append(int(event.eventData))
        return found

    def sample(self) -> list[GpuSample]:
        now = time.time()
        xids = self._drain_xids()
        out = []
        for i, h in enumerate(self._handles):
            mem = _maybe(nv.nvmlDeviceGetMemoryInfo, h)
            util = _maybe(nv.nvmlDeviceGetUtilizationRates, h)
            power = _num(_maybe(nv.nvmlDeviceGetPowerUsage, h), float)  # mW
            remap = _maybe(nv.nvmlDeviceGetRemappedRows, h)
            mem_temp = _maybe(nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_MEMORY_TEMP])
            links = self._nvlinks[i]
            nvlink_up = tuple(bool(_maybe(nv.nvmlDeviceGetNvLinkState, h, k))
                              for k in range(links))
            crc = sum(int(_maybe(nv.nvmlDeviceGetNvLinkErrorCounter, h, k,
                                 nv.NVML_NVLINK_ERROR_DL_CRC_FLIT) or 0) for k in range(links))
            throughput = _maybe(nv.nvmlDeviceGetFieldValues, h,
                                [nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                 nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX])
            enc = _maybe(nv.nvmlDeviceGetEncoderUtilization, h)  # [percent, period µs]
            dec = _maybe(nv.nvmlDeviceGetDecoderUtilization, h)
            new_xids = tuple(xids.get(i, ()))
            if new_xids:
                self._last_xid[i] = new_xids[-1]
            out.append(GpuSample(
                index=i, uuid=self._uuids[i], name=self._names[i], at=now,
                gpu_temp_c=_num(_maybe(nv.nvmlDeviceGetTemperature, h,
                                       nv.NVML_TEMPERATURE_GPU), float),
                memory_temp_c=_field(mem_temp, 0),
                power_w=power / 1000 if power is not None else None,
                energy_mj=_num(_maybe(nv.nvmlDeviceGetTotalEnergyConsumption, h), float),
                sm_clock_mhz=_num(_maybe(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM), float),
                mem_clock_mhz=_num(_maybe(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                                   float),
                gpu_util_pct=float(util.gpu) if util is not None else None,
                mem_copy_util_pct=float(util.memory) if util is not None else None,
                enc_util_pct=float(enc[0]) if enc else None,
                dec_util_pct=float(dec[0]) if dec else None,
                pcie_tx_kbps=_num(_maybe(nv.nvmlDeviceGetPcieThroughput, h,
                                         nv.NVML_PCIE_UTIL_TX_BYTES), float),
                pcie_rx_kbps=_num(_maybe(nv.nvmlDeviceGetPcieThroughput, h,
                                         nv.NVML_PCIE_UTIL_RX_BYTES), float),
                fb_used_mib=mem.used / 2**20 if mem is not None else None,
                fb_free_mib=mem.free / 2**20 if mem is not None else None,
                clocks_event_reasons=int(_maybe(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
                                         or 0),
                ecc_sbe_volatile=_num(_maybe(nv.nvmlDeviceGetTotalEccErrors, h,
                                             nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                             nv.NVML_VOLATILE_ECC), int),
                ecc_dbe_volatile=_num(_maybe(nv.nvmlDeviceGetTotalEccErrors, h,
                                             nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             nv.NVML_VOLATILE_ECC), int),
                remapped_rows_correctable=int(remap[0]) if remap else None,
                remapped_rows_uncorrectable=int(remap[1]) if remap else None,
                row_remap_failure=bool(remap[3]) if remap else False,
                pcie_replays=_num(_maybe(nv.nvmlDeviceGetPcieReplayCounter, h), int),
                nvlink_up=nvlink_up,
                nvlink_crc_errors=crc if links else None,
                nvlink_bytes_total=_total_kib(throughput),
                xids=new_xids, last_xid=self._last_xid[i]))
        return out

    def driver_version(self) -> str | None:
        return _num(_maybe(nv.nvmlSystemGetDriverVersion), _text)

    def cuda_version(self) -> str | None:
        v = _num(_maybe(nv.nvmlSystemGetCudaDriverVersion), int)
        return f"{v // 1000}.{v % 1000 // 10}" if v else None

    def close(self) -> None:
        if self._events is not None:
            _maybe(nv.nvmlEventSetFree, self._events)
        _maybe(nv.nvmlShutdown)


def _field(values: Any, i: int) -> float | None:
    """One value of nvmlDeviceGetFieldValues, or None where the field failed."""
    if not values or values[i].nvmlReturn != 0:
        return None
    v = values[i]
    return float(getattr(v.value, {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal",
                                     4: "sllVal", 5: "siVal"}.get(v.valueType, "ullVal")))


def _total_kib(values: Any) -> int | None:
    """NVLink data TX+RX counters (KiB) as bytes."""
    if not values:
        return None
    parts = [_field(values, i) for i in range(len(values))]
    if all(p is None for p in parts):
        return None
    return int(sum(p or 0 for p in parts) * 1024)
