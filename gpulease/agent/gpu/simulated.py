"""A simulated GPU server behind the same interface as NVML, for CPU machines, the demo
and fault injection. Every sample it produces says simulated=True.

Faults (`--fault KIND[:GPU[:ARG]]`, GPU defaults to 0):
  thermal        saw-tooth: the GPU heats until it throttles, cools, heats again
  xid79          the GPU reports XID 79 (fell off the bus) and stops working
  nvlink-down    one NVLink link (ARG, default 0) of the GPU is down
  slow-gpu       the GPU runs at ARG of its speed (default 0.7)
  ecc-dbe        a double-bit ECC error every sweep
  xid            the GPU reports XID ARG once (e.g. xid:3:94, a contained ECC error)
  row-remap      row remapping has failed
  unhealthy      the device reports its health as Alarm (npu-smi's verdict; 910B)
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpulease.agent.gpu.backend import GpuInfo
from gpulease.domain.fleet.telemetry import ClockEvent, GpuSample


@dataclass(frozen=True)
class Model:
    name: str
    memory_mib: int
    sm_clock_max: int
    mem_clock: int
    power_limit_w: int
    idle_w: int
    nvlinks: int
    pcie_gen: int


MODELS: dict[str, Model] = {
    "h100-80g": Model("NVIDIA H100 80GB HBM3", 81559, 1980, 2619, 700, 72, 18, 5),
    "h200-141g": Model("NVIDIA H200", 143771, 1980, 3201, 700, 76, 18, 5),
    "a100-80g": Model("NVIDIA A100-SXM4-80GB", 81920, 1410, 1593, 400, 60, 12, 4),
    "a800-80g": Model("NVIDIA A800-SXM4-80GB", 81920, 1410, 1593, 400, 60, 8, 4),
    "rtx4090-24g": Model("NVIDIA GeForce RTX 4090", 24564, 2520, 10501, 450, 25, 0, 4),
    "rtx4090-48g": Model("NVIDIA GeForce RTX 4090", 49140, 2520, 10501, 450, 25, 0, 4),
    "ascend910b-64g": Model("Ascend 910B3", 65536, 1800, 1600, 400, 80, 0, 5),
}


class VirtualClock:
    """Time that moves only when told: a simulated burn-in of minutes takes no real time."""

    def __init__(self, start: float = 1.7e9) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

FAULT_KINDS = ("thermal", "xid79", "xid", "nvlink-down", "slow-gpu", "ecc-dbe", "row-remap",
               "unhealthy")


@dataclass(frozen=True)
class Fault:
    kind: str
    gpu: int = 0
    arg: float | None = None


def parse_faults(specs: Iterable[str]) -> tuple[Fault, ...]:
    faults = []
    for spec in specs:
        parts = spec.split(":")
        if parts[0] not in FAULT_KINDS:
            raise ValueError(f"unknown fault {parts[0]!r}; known: {', '.join(FAULT_KINDS)}")
        try:
            gpu = int(parts[1]) if len(parts) > 1 and parts[1] else 0
            arg = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            raise ValueError(f"fault {spec!r}: expected KIND[:GPU[:NUMBER]]") from None
        if parts[0] == "xid" and (arg is None or arg != int(arg) or arg <= 0):
            raise ValueError(f"fault {spec!r}: say which XID, e.g. xid:3:94")
        faults.append(Fault(parts[0], gpu, arg))
    return tuple(faults)


THERMAL_PERIOD_S = 120.0  # one saw-tooth: 90 s heating, 30 s throttled


class SimulatedGpus:
    simulated = True

    def __init__(self, count: int = 8, model: str = "h100-80g",
                 faults: Iterable[Fault] = (), clock: Callable[[], float] = time.time,
                 hostname_seed: str = "sim") -> None:
        if model not in MODELS:
            raise ValueError(f"unknown simulated GPU model {model!r}; known: "
                             f"{', '.join(MODELS)}")
        self.count, self.model_id, self.model = count, model, MODELS[model]
        self.npu = model.startswith("ascend")  # read as npu-smi would: health, no XIDs
        self.device_type = "npu" if self.npu else "cuda"
        self.faults = tuple(faults)
        for f in self.faults:
            if not 0 <= f.gpu < count:
                raise ValueError(f"fault {f.kind} names GPU {f.gpu}; this server has "
                                 f"GPUs 0-{count - 1}")
        self.clock = clock
        self.virtual = isinstance(clock, VirtualClock)
        self.load = 0.0  # 0 idle … 1 full load; the burn-in sets it
        self._seed = hostname_seed
        self._sweeps = 0
        self._energy_mj = [0.0] * count
        self._dbe = [0] * count
        self._last_at: float | None = None
        self._xid_sent: set[int] = set()
        self._xids_sent: set[tuple[int, int]] = set()  # (GPU, XID) of the `xid` faults

    def _fault(self, kind: str, gpu: int) -> Fault | None:
        return next((f for f in self.faults if f.kind == kind and f.gpu == gpu), None)

    def uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self._seed}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def speed(self, index: int) -> float:
        """Relative speed of one GPU (the slow-gpu fault), for the simulated checks."""
        if self._fault("xid79", index):
            return 0.0
        f = self._fault("slow-gpu", index)
        return (f.arg if f and f.arg is not None else 0.7) if f else 1.0

    def nvlink_up(self, index: int) -> tuple[bool, ...]:
        down = {int(f.arg or 0) for f in self.faults
                if f.kind == "nvlink-down" and f.gpu == index}
        return tuple(i not in down for i in range(self.model.nvlinks))

    def devices(self) -> list[GpuInfo]:
        m = self.model
        return [GpuInfo(index=i, name=m.name, uuid=self.uuid(i), memory_mib=m.memory_mib,
                        pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                        pcie_gen=m.pcie_gen, pcie_gen_max=m.pcie_gen, pcie_width=16,
                        pcie_width_max=16, nvlink_links=m.nvlinks,
                        nvlink_up=sum(self.nvlink_up(i)), serial=f"SIM{i:010d}")
                for i in range(self.count)]

    def _temp(self, index: int, now: float) -> tuple[float, int]:
        """(temperature, clock-event bits) of one GPU at `now`."""
        base = 34 + 36 * self.load + 0.3 * math.sin(now / 7 + index)
        if self._fault("thermal", index):
            phase = now % THERMAL_PERIOD_S
            if phase < 90:
                return 70 + phase / 90 * 21, 0  # heats from 70 to 91 °C
            return 91 - (phase - 90) / 30 * 8, int(ClockEvent.HW_THERMAL_SLOWDOWN
                                                    | ClockEvent.SW_THERMAL_SLOWDOWN)
        return base, int(ClockEvent.GPU_IDLE) if self.load < 0.05 else 0

    def sample(self) -> list[GpuSample]:
        now = self.clock()
        dt = 1.0 if self._last_at is None else max(now - self._last_at, 0.0)
        self._last_at = now
        self._sweeps += 1
        m = self.model
        out = []
        for i in range(self.count):
            if self._fault("ecc-dbe", i):
                self._dbe[i] += 1
            xids: tuple[int, ...] = ()
            dead = self._fault("xid79", i) is not None
            if dead and i not in self._xid_sent:
                self._xid_sent.add(i)
                xids = (79,)
            for f in self.faults:
                if f.kind == "xid" and f.gpu == i and f.arg is not None and (
                        (i, int(f.arg)) not in self._xids_sent):
                    self._xids_sent.add((i, int(f.arg)))
                    xids += (int(f.arg),)
            temp, bits = self._temp(i, now)
            speed = self.speed(i)
            load = 0.0 if dead else self.load
            power = m.idle_w + (m.power_limit_w - m.idle_w) * 0.92 * load
            clock = m.sm_clock_max * (0.35 + 0.65 * max(load, 0.3)) * (speed or 1.0)
            if bits & int(ClockEvent.HW_THERMAL_SLOWDOWN):
                clock *= 0.6
            self._energy_mj[i] += power * dt * 1000
            used = 512 + (m.memory_mib - 1024) * 0.8 * load
            nvl = self.nvlink_up(i)
            out.append(GpuSample(
                index=i, uuid=self.uuid(i), name=m.name, at=now,
                gpu_temp_c=round(temp, 1), memory_temp_c=round(temp + 6, 1),
                power_w=round(power, 1), energy_mj=round(self._energy_mj[i], 1),
                sm_clock_mhz=round(clock), mem_clock_mhz=m.mem_clock,
                gpu_util_pct=round(100 * load * (speed or 0)),
                mem_copy_util_pct=round(60 * load * (speed or 0)),
                enc_util_pct=0.0, dec_util_pct=0.0,
                pcie_tx_kbps=round(2_000_000 * load * (speed or 0), 1),
                pcie_rx_kbps=round(6_000_000 * load * (speed or 0), 1),
                fb_used_mib=round(used), fb_free_mib=round(m.memory_mib - used),
                clocks_event_reasons=bits, ecc_sbe_volatile=0,
                ecc_dbe_volatile=self._dbe[i], remapped_rows_correctable=0,
                remapped_rows_uncorrectable=1 if self._fault("row-remap", i) else 0,
                row_remap_failure=self._fault("row-remap", i) is not None,
                pcie_replays=0, nvlink_up=nvl, nvlink_crc_errors=0,
                nvlink_bytes_total=int(self._sweeps * 1e9 * load) if any(nvl) else 0,
                xids=() if self.npu else xids,
                last_xid=0 if self.npu else (79 if dead else (xids[-1] if xids else 0)),
                simulated=True, health=self._health(i, dead) if self.npu else None))
        return out

    def _health(self, index: int, dead: bool) -> str:
        if dead:
            return "Critical"  # an NPU off the bus: npu-smi marks it, no XID exists
        return "Alarm" if self._fault("unhealthy", index) else "OK"

    def driver_version(self) -> str | None:
        return "simulated-23.0.rc3" if self.npu else "simulated-570.00"

    def cuda_version(self) -> str | None:
        return "12.8 (simulated)"

    def close(self) -> None:
        pass
