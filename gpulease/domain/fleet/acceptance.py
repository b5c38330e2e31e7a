"""The acceptance suite's judgement: measured figures against the offer's thresholds.

The agent measures (agent/gpu/checks.py); this module decides, so the same rules judge a real
run, a simulated one and a report re-read by the control plane."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulease.domain.fleet.telemetry import GpuSummary
from gpulease.domain.phrases import Phrase, listed, phrase


@dataclass(frozen=True)
class Thresholds:
    """Pass marks for one offer. Defaults are PRODUCT.md's."""

    allreduce_busbw_gbps: float | None = None  # None: no multi-GPU check for this offer
    fio_randread_iops: float = 100_000
    fio_seqread_mbps: float | None = None
    matmul_ceiling_fraction: float = 0.90  # of the GPU's measured bf16 matmul ceiling
    matmul_node_spread: float = 0.05  # every GPU within this of the node median
    hbm_fraction: float = 0.80  # of the spec memory bandwidth
    h2d_gbps: float | None = None  # per GPU host→device; from PCIe generation by default
    p2p_gbps: float | None = None  # pairwise GPU↔GPU floor, where the offer promises one
    # Long enough to see a whole throttling cycle of a hot node (a saw-tooth of about two
    # minutes: heating, throttled, cooling), and half of the next.
    burnin_s: float = 180.0
    burnin_max_clock_drop: float = 0.10  # SM clock may sag this much under load
    # Temperature ceilings under burn-in: the GPU's and its memory's maximum operating
    # temperature (nvidia-smi -q: "GPU Max Operating Temp", "Memory Max Operating Temp");
    # each SKU sets its own in the catalog. Reaching one fails, and so does a climb that
    # would reach it within one burn-in's length.
    gpu_temp_max_c: float = 85.0
    memory_temp_max_c: float = 95.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def h2d_floor_gbps(pcie_gen: int) -> float:
    """Host→device floor per GPU: ≥ 20 GB/s on Gen4 ×16, ≥ 40 on Gen5 (PRODUCT.md measures
    ~25 and ~50), halved per older generation."""
    return {3: 10.0, 4: 20.0, 5: 40.0, 6: 80.0}.get(pcie_gen, 20.0)


@dataclass(frozen=True)
class GpuSpec:
    """What the catalog promises per GPU (the report is judged against it)."""

    name: str
    bf16_dense_tflops: float
    matmul_ceiling_tflops: float  # measured ceiling; the spec × 0.8 where none is known
    memory_bandwidth_gbps: float
    pcie_gen: int
    gpu_id: str = ""  # the catalog's GPU id
    count: int = 0  # GPUs per node the offer promises; 0 = not checked


@dataclass(frozen=True)
class Measurements:
    """Raw figures from one run; a missing figure (None or empty) is reported as not run."""

    gpu_count: int
    matmul_tflops: Sequence[float] = ()
    matmul_checksums_consistent: Sequence[bool] = ()
    hbm_gbps: Sequence[float] = ()
    h2d_gbps: Sequence[float] = ()
    d2h_gbps: Sequence[float] = ()
    h2d_all_gbps: float | None = None
    p2p_gbps: Sequence[Sequence[float | None]] = ()  # [src][dst], None on the diagonal
    allreduce_busbw_gbps: float | None = None
    allreduce_bytes: int | None = None
    fio_randread_iops: float | None = None
    fio_seqread_mbps: float | None = None
    fio_target: str | None = None
    burnin: Sequence[GpuSummary] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    simulated: bool = False
    notes: Sequence[str] = ()
    # per GPU: did it run the checks at all (a GPU off the bus does not); empty = all did
    responding: Sequence[bool] = ()


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: not run (no GPU, no tool, not offered)
    value: float | None = None
    unit: str = ""
    threshold: str = ""
    gpu: int | None = None
    detail: str = ""
    # The threshold and the detail as phrases (domain/phrases JSON), so that the console
    # says them in the reader's language; absent for what a device wrote.
    phrases: dict[str, Any] = field(default_factory=dict, compare=False)


def _check(name: str, passed: bool | None, value: float | None = None, unit: str = "",
           threshold: str | Phrase = "", gpu: int | None = None,
           detail: str | Phrase = "") -> Check:
    """A check whose threshold and detail may be phrases: kept as English text, and as
    phrases for the reader's language."""
    phrases = {key: text.to_json() for key, text in (("threshold", threshold),
                                                      ("detail", detail))
               if isinstance(text, Phrase)}
    return Check(name, passed, value, unit, str(threshold), gpu, str(detail), phrases)


@dataclass(frozen=True)
class Report:
    passed: bool
    checks: tuple[Check, ...]
    simulated: bool
    driver_version: str | None = None
    cuda_version: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "simulated": self.simulated,
                "driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "checks": [asdict(c) for c in self.checks], "notes": list(self.notes),
                "summary": self.summary()}

    def summary(self) -> str:
        """A readable text version for the tenant and the operator."""
        head = "PASSED" if self.passed else "FAILED"
        lines = [f"Acceptance {head}" + (" (SIMULATED hardware)" if self.simulated else "")]
        if self.driver_version or self.cuda_version:
            lines.append(f"driver {self.driver_version or '?'}, CUDA {self.cuda_version or '?'}")
        for c in self.checks:
            mark = {True: "ok  ", False: "FAIL", None: "skip"}[c.passed]
            where = f" gpu{c.gpu}" if c.gpu is not None else ""
            value = f"{c.value:,.1f} {c.unit}" if c.value is not None else "-"
            lines.append(f"  [{mark}] {c.name}{where}: {value}"
                         + (f" (need {c.threshold})" if c.threshold else "")
                         + (f" - {c.detail}" if c.detail else ""))
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _at_least(name: str, value: float | None, floor: float | None, unit: str,
              gpu: int | None = None, detail: str | Phrase = "") -> Check:
    if value is None:
        return _check(name, None, None, unit, "", gpu, detail or phrase("not measured"))
    if floor is None:
        return _check(name, None, value, unit, "", gpu,
                      detail or phrase("no threshold for this offer"))
    return _check(name, value >= floor, value, unit, f"≥ {floor:,.1f} {unit}", gpu, detail)


NOT_RUN = phrase("not run: the GPU does not respond")


def _silent(m: Measurements) -> set[int]:
    """The GPUs that did not respond (they ran no check)."""
    return {gpu for gpu, ran in enumerate(m.responding) if not ran}


def _responding(m: Measurements) -> list[Check]:
    """One failed check per GPU that does not respond, named for what it is: a GPU that
    fell off the bus (XID 79) is not responding, not corrupting data."""
    xids = {g.index: set(g.xids) for g in m.burnin}
    health = {g.index: g.health for g in m.burnin}

    def why(gpu: int) -> Phrase:
        if 79 in xids.get(gpu, ()):
            return phrase("not responding (XID 79: fell off the bus)")
        if health.get(gpu) not in (None, "OK"):
            return phrase("not responding (the device reports {health})", health=health[gpu])
        return phrase("not responding (no XID reported)")

    return [_check("gpu_responding", False, None, "", phrase("runs the checks"), gpu, why(gpu))
            for gpu in sorted(_silent(m))]


def _matmul(m: Measurements, t: Thresholds, spec: GpuSpec) -> list[Check]:
    if not m.matmul_tflops:
        return [_check("matmul_bf16", None, detail=phrase("needs CUDA and PyTorch"))]
    silent = _silent(m)
    floor = t.matmul_ceiling_fraction * spec.matmul_ceiling_tflops
    ran = [v for gpu, v in enumerate(m.matmul_tflops) if gpu not in silent]
    median = statistics.median(ran) if ran else 0.0
    checks = []
    for gpu, tflops in enumerate(m.matmul_tflops):
        if gpu in silent:
            checks.append(_check("matmul_bf16", None, None, "TFLOP/s", "", gpu, NOT_RUN))
            continue
        spread = abs(tflops - median) / median if median else 1.0
        ok = tflops >= floor and spread <= t.matmul_node_spread
        why = phrase("{spread:.1%} from the node median {median:,.1f}", spread=spread,
                     median=median)
        checks.append(_check("matmul_bf16", ok, tflops, "TFLOP/s",
                             phrase("≥ {floor:,.1f} and within {spread:.0%} of median",
                                    floor=floor, spread=t.matmul_node_spread), gpu, why))
    for gpu, same in enumerate(m.matmul_checksums_consistent):
        if gpu in silent:  # judged only on GPUs that ran
            continue
        checks.append(_check("matmul_checksum", bool(same), None, "",
                             phrase("identical every iteration"), gpu,
                             "" if same else phrase("results differed between identical "
                                                    "runs: silent data corruption")))
    return checks


def _per_gpu(name: str, values: Sequence[float], floor: float | None, unit: str,
             silent: set[int]) -> list[Check]:
    return [_check(name, None, None, unit, "", gpu, NOT_RUN) if gpu in silent
            else _at_least(name, v, floor, unit, gpu) for gpu, v in enumerate(values)]


def _burnin(m: Measurements, t: Thresholds) -> list[Check]:
    if not m.burnin:
        return [_check("burnin", None, detail=phrase("not run"))]
    checks = []
    for g in m.burnin:
        problems = _heat(g, t)
        if g.power_brake_samples:
            problems.append(phrase("hardware or power-brake slowdown in {samples} sample(s)",
                                   samples=g.power_brake_samples))
        if g.power_throttle_s > 0.5 * max(g.end - g.start, 1.0):
            problems.append(phrase("power capped {seconds:.0f} s", seconds=g.power_throttle_s))
        if g.xids:
            problems.append(phrase("XIDs {xids}", xids=str(sorted(set(g.xids)))))
        if g.ecc_dbe_delta:
            problems.append(phrase("{count} new double-bit ECC errors", count=g.ecc_dbe_delta))
        if g.row_remap_failure:
            problems.append(phrase("row remap failure"))
        if g.nvlink_down:
            problems.append(phrase("NVLink down on link(s) {links}",
                                   links=str(list(g.nvlink_down))))
        if g.health not in (None, "OK"):
            problems.append(phrase("the device reports its health as {health}",
                                   health=g.health))
        drop = None
        if g.sm_clock_max_mhz and g.sm_clock_min_mhz is not None:
            drop = 1 - g.sm_clock_min_mhz / g.sm_clock_max_mhz
            if drop > t.burnin_max_clock_drop:
                problems.append(phrase("SM clock fell {drop:.0%} (saw-tooth)", drop=drop))
        checks.append(_check(
            "burnin", not problems, g.temp_max_c, "°C max",
            phrase("below {gpu:.0f} °C (memory {memory:.0f} °C) and not heading there; no "
                   "throttling, XID, ECC growth; clock drop ≤ {drop:.0%}",
                   gpu=t.gpu_temp_max_c, memory=t.memory_temp_max_c,
                   drop=t.burnin_max_clock_drop), g.index,
            listed(problems) if problems else phrase(
                "{samples} samples, {seconds:.0f} s", samples=g.samples,
                seconds=g.end - g.start)))
    return checks


def _heat(g: GpuSummary, t: Thresholds) -> list[Phrase]:
    """Thermal problems of one GPU's burn-in: slowdown at any sample, a ceiling reached,
    or a climb that would reach the ceiling within one burn-in's length (a climb that is
    slowing counts only up to where it levels off)."""
    problems = []
    if g.thermal_samples or g.thermal_throttle_s > 0:
        samples = max(g.thermal_samples, 1)
        problems.append(phrase("thermal slowdown in {samples} sample(s), {seconds:.0f} s",
                               samples=samples, seconds=g.thermal_throttle_s)
                        if g.thermal_throttle_s else
                        phrase("thermal slowdown in {samples} sample(s)", samples=samples))
    if g.temp_max_c is not None and g.temp_max_c >= t.gpu_temp_max_c:
        problems.append(phrase("GPU at {temp:.0f} °C, ceiling {ceiling:.0f} °C",
                               temp=g.temp_max_c, ceiling=t.gpu_temp_max_c))
    if g.memory_temp_max_c is not None and g.memory_temp_max_c >= t.memory_temp_max_c:
        problems.append(phrase("memory at {temp:.0f} °C, ceiling {ceiling:.0f} °C",
                               temp=g.memory_temp_max_c, ceiling=t.memory_temp_max_c))
    if (g.temp_rise_c_per_s and g.temp_last_c is not None
            and g.temp_last_c < t.gpu_temp_max_c):
        projected = g.temp_last_c + g.temp_rise_c_per_s * t.burnin_s
        if g.temp_settle_c is not None:
            projected = min(projected, g.temp_settle_c)
        if projected >= t.gpu_temp_max_c:
            reach = (t.gpu_temp_max_c - g.temp_last_c) / g.temp_rise_c_per_s
            problems.append(phrase("heating {rate:.1f} °C/min at {temp:.0f} °C: the "
                                   "{ceiling:.0f} °C ceiling in about {seconds:.0f} s",
                                   rate=g.temp_rise_c_per_s * 60, temp=g.temp_last_c,
                                   ceiling=t.gpu_temp_max_c, seconds=reach))
    return problems


def judge(m: Measurements, t: Thresholds, spec: GpuSpec) -> Report:
    """Judge one run. A check that could not run does not fail the report, except on a
    real GPU node where the GPU checks themselves are missing."""
    checks: list[Check] = []
    if spec.count:
        checks.append(_check("gpu_count", m.gpu_count == spec.count, m.gpu_count, "GPUs",
                             f"= {spec.count}", detail="" if m.gpu_count == spec.count
                             else phrase("a GPU is missing from the bus or the driver")))
    silent = _silent(m)
    checks += _responding(m)
    checks += _matmul(m, t, spec)
    hbm_floor = t.hbm_fraction * spec.memory_bandwidth_gbps
    checks += _per_gpu("hbm_bandwidth", m.hbm_gbps, hbm_floor, "GB/s", silent) or [
        _check("hbm_bandwidth", None, detail=phrase("needs CUDA and PyTorch"))]
    h2d_floor = t.h2d_gbps if t.h2d_gbps is not None else h2d_floor_gbps(spec.pcie_gen)
    checks += _per_gpu("host_to_device", m.h2d_gbps, h2d_floor, "GB/s", silent)
    checks += _per_gpu("device_to_host", m.d2h_gbps, h2d_floor, "GB/s", silent)
    if m.h2d_all_gbps is not None:
        checks.append(_at_least("host_to_device_all", m.h2d_all_gbps, None, "GB/s",
                                detail=phrase("all GPUs at once; reported, not judged")))
    for src, row in enumerate(m.p2p_gbps):
        for dst, v in enumerate(row):
            if v is not None and src != dst:
                checks.append(_at_least(f"p2p_gpu{src}_to_gpu{dst}", v, t.p2p_gbps, "GB/s",
                                        src))
    if m.gpu_count > 1 and silent:
        checks.append(_check("allreduce_busbw", None, unit="GB/s", detail=phrase(
            "not run: GPU {gpus} does not respond", gpus=", ".join(map(str, sorted(silent))))))
    elif m.gpu_count > 1:
        size: str | Phrase = phrase("{size:.0f} GiB messages",
                                    size=m.allreduce_bytes / 2**30) if m.allreduce_bytes else ""
        checks.append(_at_least("allreduce_busbw", m.allreduce_busbw_gbps,
                                t.allreduce_busbw_gbps, "GB/s", detail=size))
    checks.append(_at_least("fio_randread_4k", m.fio_randread_iops, t.fio_randread_iops,
                            "IOPS", detail=m.fio_target or ""))
    checks.append(_at_least("fio_seqread", m.fio_seqread_mbps, t.fio_seqread_mbps, "MB/s",
                            detail=m.fio_target or ""))
    checks += _burnin(m, t)
    passed = all(c.passed is not False for c in checks)
    return Report(passed=passed, checks=tuple(checks), simulated=m.simulated,
                  driver_version=m.driver_version, cuda_version=m.cuda_version,
                  notes=tuple(m.notes))
