"""Ascend NPUs (910B) read through Huawei's `npu-smi`, behind the same interface as NVML.

One `npu-smi info` per sweep gives every NPU's health, power, temperature, AI-core use and
HBM use (its two-line-per-NPU table); ECC counters (`npu-smi info -t ecc -i N`) are read
every `ecc_every` sweeps, the board's identity (`-t board`) once. What a version of
npu-smi leaves out stays unknown (None), never zero. The parsers take the text as
npu-smi prints it, so they are tested against recorded outputs without an NPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpulease.agent.gpu.backend import BackendUnavailable, GpuInfo
from gpulease.domain.fleet.telemetry import GpuSample

Runner = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class NpuRow:
    """One NPU of the `npu-smi info` table."""

    npu: int
    chip: int
    name: str  # "910B3"
    health: str  # OK | Warning | Alarm | Critical
    power_w: float | None
    temp_c: float | None
    bus_id: str | None
    aicore_pct: float | None
    hbm_used_mb: float | None
    hbm_total_mb: float | None


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_VERSION = re.compile(r"Version:\s*(\S+)")


def _float(text: str | None) -> float | None:
    return float(text) if text is not None and _NUMBER.fullmatch(text) else None


def parse_info(text: str) -> tuple[list[NpuRow], str | None]:
    """The NPUs of `npu-smi info` and the driver version in its header."""
    version = m.group(1) if (m := _VERSION.search(text)) else None
    rows: list[list[str]] = []
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            break  # the process table follows the NPU table
        if not line.startswith("|") or "===" in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0].startswith(("NPU", "Chip", "npu-smi")):
            continue
        rows.append(cells)
    npus = []
    for first, second in zip(rows[::2], rows[1::2], strict=False):
        head = first[0].split()
        if len(head) < 2 or not head[0].isdigit():
            continue
        figures = first[2].split()
        pairs = _PAIR.findall(second[2])
        aicore = second[2].split()[0] if second[2].split() else None
        hbm = pairs[-1] if len(pairs) >= 2 else None  # Memory-Usage, then HBM-Usage
        npus.append(NpuRow(
            npu=int(head[0]), chip=int(second[0]) if second[0].isdigit() else 0,
            name=" ".join(head[1:]), health=first[1] or "Unknown",
            power_w=_float(figures[0]) if figures else None,
            temp_c=_float(figures[1]) if len(figures) > 1 else None,
            bus_id=second[1] or None, aicore_pct=_float(aicore),
            hbm_used_mb=float(hbm[0]) if hbm else None,
            hbm_total_mb=float(hbm[1]) if hbm else None))
    return npus, version


def parse_fields(text: str) -> dict[str, str]:
    """`Key : value` lines (`npu-smi info -t ecc|board|temp|power …`)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def _int(fields: dict[str, str], *keys: str) -> int | None:
    for key in keys:
        value = fields.get(key)
        if value is not None and value.isdigit():
            return int(value)
    return None


def run_npu_smi(args: Sequence[str]) -> str:
    tool = shutil.which("npu-smi")
    if tool is None:
        raise BackendUnavailable("npu-smi is not installed (Ascend driver: "
                                 "/usr/local/Ascend/driver/tools/npu-smi on the PATH)")
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=30,
                          check=False)
    if done.returncode != 0:
        raise BackendUnavailable(f"npu-smi {' '.join(args)} failed: "
                                 f"{(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


class NpuSmiBackend:
    """Ascend NPUs as the agent's GPUs (index = NPU ID)."""

    simulated = False
    device_type = "npu"  # PyTorch's device for the checks (torch_npu)

    def __init__(self, runner: Runner = run_npu_smi, ecc_every: int = 10,
                 clock: Callable[[], float] = time.time) -> None:
        self._run, self._ecc_every, self._clock = runner, max(1, ecc_every), clock
        npus, self._version = parse_info(self._run(["info"]))
        if not npus:
            raise BackendUnavailable("npu-smi lists no NPU")
        self._sweeps = 0
        self._ecc: dict[int, tuple[int | None, int | None]] = {}
        self._boards = {n.npu: parse_fields(self._run(["info", "-t", "board", "-i",
                                                       str(n.npu)])) for n in npus}
        self._npus = npus

    def _uuid(self, row: NpuRow) -> str:
        board = self._boards.get(row.npu, {})
        serial = board.get("Serial Number") or board.get("SN")
        return f"NPU-{serial or row.bus_id or row.npu}"

    def devices(self) -> list[GpuInfo]:
        return [GpuInfo(index=n.npu, name=f"Ascend {n.name}", uuid=self._uuid(n),
                        memory_mib=int(n.hbm_total_mb or 0), pci_bus_id=n.bus_id,
                        serial=self._boards.get(n.npu, {}).get("Serial Number"))
                for n in self._npus]

    def _read_ecc(self, npu: int) -> tuple[int | None, int | None]:
        fields = parse_fields(self._run(["info", "-t", "ecc", "-i", str(npu)]))
        return (_int(fields, "HBM Single Bit Error Count", "Single Bit Error Count"),
                _int(fields, "HBM Double Bit Error Count", "Double Bit Error Count"))

    def sample(self) -> list[GpuSample]:
        now = self._clock()
        npus, _ = parse_info(self._run(["info"]))
        if npus:
            self._npus = npus
        if self._sweeps % self._ecc_every == 0:
            self._ecc = {n.npu: self._read_ecc(n.npu) for n in self._npus}
        self._sweeps += 1
        out = []
        for n in self._npus:
            sbe, dbe = self._ecc.get(n.npu, (None, None))
            free = (n.hbm_total_mb - n.hbm_used_mb
                    if n.hbm_total_mb is not None and n.hbm_used_mb is not None else None)
            out.append(GpuSample(
                index=n.npu, uuid=self._uuid(n), name=f"Ascend {n.name}", at=now,
                gpu_temp_c=n.temp_c, power_w=n.power_w, gpu_util_pct=n.aicore_pct,
                fb_used_mib=n.hbm_used_mb, fb_free_mib=free, ecc_sbe_volatile=sbe,
                ecc_dbe_volatile=dbe, health=n.health))
        return out

    def driver_version(self) -> str | None:
        return self._version

    def cuda_version(self) -> str | None:
        return None  # CANN's version is not npu-smi's to tell

    def close(self) -> None:
        pass
