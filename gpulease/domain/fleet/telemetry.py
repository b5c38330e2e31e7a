"""GPU telemetry: one sample per GPU per sweep, summaries over a window, and the alerts a
provider acts on. Shared by the node agent (which samples) and the control plane (which
keeps summaries per instance); no I/O here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import IntFlag, StrEnum
from typing import Any

from gpulease.domain.phrases import Phrase, phrase


class ClockEvent(IntFlag):
    """NVML clocks-event (throttle) reason bits, as DCGM_FI_DEV_CLOCKS_EVENT_REASONS reports."""

    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL_SLOWDOWN = 0x20
    HW_THERMAL_SLOWDOWN = 0x40
    HW_POWER_BRAKE_SLOWDOWN = 0x80
    DISPLAY_CLOCK_SETTING = 0x100


THERMAL_BITS = ClockEvent.SW_THERMAL_SLOWDOWN | ClockEvent.HW_THERMAL_SLOWDOWN
POWER_BITS = ClockEvent.SW_POWER_CAP | ClockEvent.HW_POWER_BRAKE_SLOWDOWN
# Slowdowns a healthy GPU never shows under load (the software power cap it may: it is how
# a GPU holds its power limit).
HW_SLOWDOWN_BITS = ClockEvent.HW_SLOWDOWN | ClockEvent.HW_POWER_BRAKE_SLOWDOWN
MIN_CLIMB_C = 0.5  # a climb smaller than this over a window is noise, not heating

# XID codes that mean hardware trouble (NVIDIA's XID catalogue).
XID_FELL_OFF_BUS = 79
XID_DOUBLE_BIT_ECC = 48  # uncorrectable memory error; the GPU needs a reset
XID_CONTAINED_ECC = 94  # one process stopped by a memory error; the GPU runs on
XID_UNCONTAINED_ECC = 95  # a memory error every process on the GPU may have met: reset it
XID_ROW_REMAP_FAILURE = 64  # a row could not be remapped (63 records a remap: no fault)
XID_NVLINK = 74


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. None = the GPU or driver does not report it."""

    index: int
    uuid: str
    name: str
    at: float  # seconds since the epoch
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None  # since driver load
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    gpu_util_pct: float | None = None
    mem_copy_util_pct: float | None = None
    enc_util_pct: float | None = None
    dec_util_pct: float | None = None
    pcie_tx_kbps: float | None = None  # PCIe throughput as NVML reports it (KB/s)
    pcie_rx_kbps: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    clocks_event_reasons: int = 0
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failure: bool = False
    pcie_replays: int | None = None
    nvlink_up: tuple[bool, ...] = ()  # one entry per link the GPU has
    nvlink_crc_errors: int | None = None
    nvlink_bytes_total: int | None = None
    xids: tuple[int, ...] = ()  # XID events seen since the previous sample
    last_xid: int = 0
    simulated: bool = False
    health: str | None = None  # the device's own verdict where it gives one (npu-smi)


@dataclass(frozen=True)
class GpuSummary:
    """What a window of samples says about one GPU: the form pushed to the control plane."""

    index: int
    uuid: str
    name: str
    samples: int
    start: float
    end: float
    temp_max_c: float | None
    temp_avg_c: float | None
    power_avg_w: float | None
    power_max_w: float | None
    util_avg_pct: float | None
    sm_clock_min_mhz: float | None
    sm_clock_max_mhz: float | None
    fb_used_max_mib: float | None
    thermal_throttle_s: float
    power_throttle_s: float
    xids: tuple[int, ...]
    ecc_sbe_delta: int
    ecc_dbe_delta: int
    ecc_dbe_total: int
    remapped_rows_uncorrectable: int
    row_remap_failure: bool
    pcie_replay_delta: int
    nvlink_links: int
    nvlink_down: tuple[int, ...]  # link numbers down at the window's end
    energy_j: float | None
    simulated: bool = False
    # Read by the burn-in's judgement (domain/fleet/acceptance.py); defaults for summaries pushed
    # by older agents.
    memory_temp_max_c: float | None = None
    temp_last_c: float | None = None
    thermal_samples: int = 0  # samples showing thermal slowdown (any one counts)
    power_brake_samples: int = 0  # samples showing hardware or power-brake slowdown
    temp_rise_c_per_s: float | None = None  # a steady climb over the window, else None
    temp_settle_c: float | None = None  # where a slowing climb levels off, else None
    health: str | None = None  # the worst health the device reported in the window

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuSummary:
        data = dict(data)
        data["xids"] = tuple(data.get("xids", ()))
        data["nvlink_down"] = tuple(data.get("nvlink_down", ()))
        return cls(**data)


def _values(samples: Sequence[GpuSample], attr: str) -> list[float]:
    return [float(v) for s in samples if (v := getattr(s, attr)) is not None]


def _delta(samples: Sequence[GpuSample], attr: str) -> int:
    vals = [int(v) for s in samples if (v := getattr(s, attr)) is not None]
    return max(0, vals[-1] - vals[0]) if len(vals) > 1 else 0


def _time_with(samples: Sequence[GpuSample], bits: int) -> float:
    """Seconds during which any of `bits` was set: each sample stands for the time until
    the next one (the last one for the median interval)."""
    if not samples:
        return 0.0
    gaps = [b.at - a.at for a, b in zip(samples, samples[1:], strict=False)]
    typical = sorted(gaps)[len(gaps) // 2] if gaps else 1.0
    total = 0.0
    for i, s in enumerate(samples):
        if s.clocks_event_reasons & bits:
            total += gaps[i] if i < len(gaps) else typical
    return total


def summarize(samples: Iterable[GpuSample]) -> list[GpuSummary]:
    """One summary per GPU over the given samples (any order, any mix of GPUs)."""
    by_gpu: dict[int, list[GpuSample]] = {}
    for s in samples:
        by_gpu.setdefault(s.index, []).append(s)
    out = []
    for index in sorted(by_gpu):
        ss = sorted(by_gpu[index], key=lambda s: s.at)
        last = ss[-1]
        temps, power = _values(ss, "gpu_temp_c"), _values(ss, "power_w")
        clocks, util = _values(ss, "sm_clock_mhz"), _values(ss, "gpu_util_pct")
        fb, energy = _values(ss, "fb_used_mib"), _values(ss, "energy_mj")
        xids = tuple(x for s in ss for x in s.xids)
        out.append(GpuSummary(
            index=index, uuid=last.uuid, name=last.name, samples=len(ss),
            start=ss[0].at, end=last.at,
            temp_max_c=max(temps, default=None),
            temp_avg_c=round(sum(temps) / len(temps), 2) if temps else None,
            power_avg_w=round(sum(power) / len(power), 2) if power else None,
            power_max_w=max(power, default=None),
            util_avg_pct=round(sum(util) / len(util), 2) if util else None,
            sm_clock_min_mhz=min(clocks, default=None),
            sm_clock_max_mhz=max(clocks, default=None),
            fb_used_max_mib=max(fb, default=None),
            thermal_throttle_s=round(_time_with(ss, THERMAL_BITS), 3),
            power_throttle_s=round(_time_with(ss, POWER_BITS), 3),
            xids=xids,
            ecc_sbe_delta=_delta(ss, "ecc_sbe_volatile"),
            ecc_dbe_delta=_delta(ss, "ecc_dbe_volatile"),
            ecc_dbe_total=int(last.ecc_dbe_volatile or 0),
            remapped_rows_uncorrectable=int(last.remapped_rows_uncorrectable or 0),
            row_remap_failure=any(s.row_remap_failure for s in ss),
            pcie_replay_delta=_delta(ss, "pcie_replays"),
            nvlink_links=len(last.nvlink_up),
            nvlink_down=tuple(i for i, up in enumerate(last.nvlink_up) if not up),
            energy_j=round((energy[-1] - energy[0]) / 1000, 3) if len(energy) > 1 else None,
            simulated=any(s.simulated for s in ss),
            memory_temp_max_c=max(_values(ss, "memory_temp_c"), default=None),
            temp_last_c=temps[-1] if temps else None,
            thermal_samples=sum(1 for s in ss if s.clocks_event_reasons & THERMAL_BITS),
            power_brake_samples=sum(1 for s in ss
                                    if s.clocks_event_reasons & HW_SLOWDOWN_BITS),
            health=_worst_health(ss),
            **_trend(ss),
        ))
    return out


HEALTH_ORDER = ("OK", "Warning", "Alarm", "Critical")  # npu-smi's words, mildest first


def _worst_health(samples: Sequence[GpuSample]) -> str | None:
    seen = [s.health for s in samples if s.health]
    if not seen:
        return None
    return max(seen, key=lambda h: HEALTH_ORDER.index(h) if h in HEALTH_ORDER else 2)


def _trend(samples: Sequence[GpuSample]) -> dict[str, float | None]:
    """How the temperature moves over a window: the mean of each third of the samples.
    A steady climb (each third warmer, by MIN_CLIMB_C or more in all) gives its rate; a
    climb that slows (each third's rise smaller than the one before, as a GPU warming
    towards its steady temperature) also gives where it levels off, by the geometric
    series of the rises. Noise and a steady temperature give neither."""
    points = [(s.at, float(s.gpu_temp_c)) for s in samples if s.gpu_temp_c is not None]
    none: dict[str, float | None] = {"temp_rise_c_per_s": None, "temp_settle_c": None}
    if len(points) < 3:
        return none
    k = len(points) // 3
    thirds = [points[:k], points[k:len(points) - k], points[len(points) - k:]]
    (a1, t1), (a2, t2), (a3, t3) = (
        (sum(a for a, _ in p) / len(p), sum(t for _, t in p) / len(p)) for p in thirds)
    if not (t1 < t2 < t3) or t3 - t1 < MIN_CLIMB_C or a3 <= a1:
        return none
    rise = (t3 - t1) / (a3 - a1)
    first, second = (t2 - t1) / (a2 - a1), (t3 - t2) / (a3 - a2)  # °C/s in each half
    settle = None
    if second < 0.8 * first:  # slowing: the rises shrink by r per step of (a3 - a2)
        r = second / first
        settle = t3 + (t3 - t2) * r / (1 - r)
    return {"temp_rise_c_per_s": round(rise, 4),
            "temp_settle_c": round(settle, 2) if settle is not None else None}


class AlertKind(StrEnum):
    THERMAL_THROTTLING = "thermal_throttling"
    GPU_FELL_OFF_BUS = "gpu_fell_off_bus"  # XID 79
    DOUBLE_BIT_ECC = "double_bit_ecc"  # XID 48 or the ECC counters
    ECC_CONTAINED = "ecc_contained"  # XID 94
    ECC_UNCONTAINED = "ecc_uncontained"  # XID 95
    NVLINK_DOWN = "nvlink_down"
    ROW_REMAP_FAILURE = "row_remap_failure"
    DEVICE_UNHEALTHY = "device_unhealthy"  # the NPU's own health: Alarm or Critical


@dataclass(frozen=True)
class AlertRules:
    # Thermal throttling counts as sustained once it covers this share of the window and
    # at least `thermal_min_s` seconds (one hot second under full load is normal).
    thermal_share: float = 0.2
    thermal_min_s: float = 30.0
    # The span the platform joins a GPU's windows over for that judgement (a throttled 30 s
    # of a saw-tooth is split by window edges, or longer than a short window):
    # services/fleet/alerts.py, as the thermal alert rules do over 10 minutes.
    thermal_span_s: float = 600.0


@dataclass(frozen=True)
class Alert:
    kind: AlertKind
    gpu: int
    uuid: str
    message: str
    severity: str = "critical"
    phrase: Phrase | None = field(default=None, compare=False)  # the message, to translate

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "gpu": self.gpu, "uuid": self.uuid,
                "message": self.message, "severity": self.severity}


def _alert(kind: AlertKind, g: GpuSummary, text: Phrase, severity: str = "critical") -> Alert:
    return Alert(kind, g.index, g.uuid, str(text), severity, text)


def alerts_for(summaries: Iterable[GpuSummary], rules: AlertRules = AlertRules(),
               joined: Mapping[int, GpuSummary] | None = None) -> list[Alert]:
    """The hardware problems a window shows, one alert per kind per GPU. `joined`: a GPU's
    recent windows merged (the last `rules.thermal_span_s`, this one included), which
    thermal throttling is judged over instead of the window alone."""
    alerts: list[Alert] = []
    for g in summaries:
        label = phrase("GPU {gpu} ({uuid})", gpu=g.index, uuid=g.uuid)
        over = (joined or {}).get(g.index, g)
        span = max(over.end - over.start, 0.0)
        if over.thermal_throttle_s >= rules.thermal_min_s and (
                span == 0 or over.thermal_throttle_s >= rules.thermal_share * span):
            alerts.append(_alert(AlertKind.THERMAL_THROTTLING, g, phrase(
                "{label} thermally throttled for {throttled:.0f} s of {span:.0f} s (max "
                "{temp} °C); check cooling and airflow", label=label,
                throttled=over.thermal_throttle_s, span=span, temp=over.temp_max_c),
                severity="warning"))
        if XID_FELL_OFF_BUS in g.xids:
            alerts.append(_alert(AlertKind.GPU_FELL_OFF_BUS, g, phrase(
                "{label} reported XID 79: it fell off the bus; the node needs a hardware "
                "check", label=label)))
        if g.ecc_dbe_delta > 0 or XID_DOUBLE_BIT_ECC in g.xids:
            alerts.append(_alert(AlertKind.DOUBLE_BIT_ECC, g, phrase(
                "{label}: {new} new double-bit ECC error(s) (total {total}); XIDs {xids}",
                label=label, new=g.ecc_dbe_delta, total=g.ecc_dbe_total,
                xids=str(list(g.xids)) if g.xids else phrase("none"))))
        if XID_UNCONTAINED_ECC in g.xids:
            alerts.append(_alert(AlertKind.ECC_UNCONTAINED, g, phrase(
                "{label} reported XID 95: an uncontained memory error that every process on "
                "the GPU may have met; the GPU needs a reset, and a check if it recurs",
                label=label)))
        if XID_CONTAINED_ECC in g.xids:
            alerts.append(_alert(AlertKind.ECC_CONTAINED, g, phrase(
                "{label} reported XID 94: a contained memory error stopped one process; the "
                "GPU runs on and remaps the row at its next reset", label=label),
                severity="warning"))
        if g.nvlink_down or XID_NVLINK in g.xids:
            links: str | Phrase = (", ".join(str(i) for i in g.nvlink_down)
                                   or phrase("none reported down"))
            alerts.append(_alert(AlertKind.NVLINK_DOWN, g, phrase(
                "{label}: NVLink error (links down: {links} of {count}; XID 74)", label=label,
                links=links, count=g.nvlink_links) if XID_NVLINK in g.xids else phrase(
                "{label}: NVLink error (links down: {links} of {count})", label=label,
                links=links, count=g.nvlink_links)))
        if g.row_remap_failure or XID_ROW_REMAP_FAILURE in g.xids:
            alerts.append(_alert(AlertKind.ROW_REMAP_FAILURE, g, phrase(
                "{label}: row remapping failed ({rows} uncorrectable rows remapped; XID 64); "
                "the GPU needs replacement", label=label, rows=g.remapped_rows_uncorrectable)
                if XID_ROW_REMAP_FAILURE in g.xids else phrase(
                "{label}: row remapping failed ({rows} uncorrectable rows remapped); the GPU "
                "needs replacement", label=label, rows=g.remapped_rows_uncorrectable)))
        if g.health in ("Alarm", "Critical"):
            alerts.append(_alert(AlertKind.DEVICE_UNHEALTHY, g, phrase(
                "{label}: the device reports its health as {health}", label=label,
                health=g.health)))
    return alerts


@dataclass
class SampleWindow:
    """The last `seconds` of samples (the agent keeps one per process)."""

    seconds: float
    samples: list[GpuSample] = field(default_factory=list)

    def add(self, batch: Iterable[GpuSample]) -> None:
        self.samples.extend(batch)
        if self.samples:
            cutoff = self.samples[-1].at - self.seconds
            if self.samples[0].at < cutoff:
                self.samples = [s for s in self.samples if s.at >= cutoff]

    def latest(self) -> list[GpuSample]:
        newest: dict[int, GpuSample] = {}
        for s in self.samples:
            newest[s.index] = s
        return [newest[i] for i in sorted(newest)]


def _weighted(parts: Sequence[GpuSummary], attr: str) -> float | None:
    """The sample-weighted mean of an average over windows that have it."""
    pairs = [(float(v), p.samples) for p in parts if (v := getattr(p, attr)) is not None]
    weight = sum(n for _, n in pairs)
    if not pairs:
        return None
    if weight == 0:
        return sum(v for v, _ in pairs) / len(pairs)
    return sum(v * n for v, n in pairs) / weight


def _extreme(parts: Sequence[GpuSummary], attr: str, pick: Callable[[list[float]], float]
             ) -> float | None:
    vals = [float(v) for p in parts if (v := getattr(p, attr)) is not None]
    return pick(vals) if vals else None


def merge(parts: Sequence[GpuSummary]) -> GpuSummary:
    """One summary of one GPU over consecutive windows (an hour of per-minute summaries,
    for retention): extremes of extremes, sample-weighted means, sums of counts and
    seconds, every XID, and the state at the last window's end."""
    if not parts:
        raise ValueError("nothing to merge")
    parts = sorted(parts, key=lambda p: (p.start, p.end))
    last = parts[-1]
    energies = [p.energy_j for p in parts if p.energy_j is not None]
    unhealthy = [p.health for p in parts if p.health not in (None, "OK", "Healthy")]
    return GpuSummary(
        index=last.index, uuid=last.uuid, name=last.name,
        samples=sum(p.samples for p in parts), start=parts[0].start,
        end=max(p.end for p in parts),
        temp_max_c=_extreme(parts, "temp_max_c", max),
        temp_avg_c=_weighted(parts, "temp_avg_c"),
        power_avg_w=_weighted(parts, "power_avg_w"),
        power_max_w=_extreme(parts, "power_max_w", max),
        util_avg_pct=_weighted(parts, "util_avg_pct"),
        sm_clock_min_mhz=_extreme(parts, "sm_clock_min_mhz", min),
        sm_clock_max_mhz=_extreme(parts, "sm_clock_max_mhz", max),
        fb_used_max_mib=_extreme(parts, "fb_used_max_mib", max),
        thermal_throttle_s=sum(p.thermal_throttle_s for p in parts),
        power_throttle_s=sum(p.power_throttle_s for p in parts),
        xids=tuple(sorted({x for p in parts for x in p.xids})),
        ecc_sbe_delta=sum(p.ecc_sbe_delta for p in parts),
        ecc_dbe_delta=sum(p.ecc_dbe_delta for p in parts),
        ecc_dbe_total=max(p.ecc_dbe_total for p in parts),
        remapped_rows_uncorrectable=max(p.remapped_rows_uncorrectable for p in parts),
        row_remap_failure=any(p.row_remap_failure for p in parts),
        pcie_replay_delta=sum(p.pcie_replay_delta for p in parts),
        nvlink_links=last.nvlink_links, nvlink_down=last.nvlink_down,
        energy_j=sum(energies) if energies else None,
        simulated=any(p.simulated for p in parts),
        memory_temp_max_c=_extreme(parts, "memory_temp_max_c", max),
        temp_last_c=last.temp_last_c,
        thermal_samples=sum(p.thermal_samples for p in parts),
        power_brake_samples=sum(p.power_brake_samples for p in parts),
        temp_rise_c_per_s=None, temp_settle_c=None,
        health=unhealthy[0] if unhealthy else last.health,
    )
