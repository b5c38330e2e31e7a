"""What the agent reports about its server: GPUs, CPUs, memory, disks, NICs (InfiniBand
HCAs included), driver and CUDA versions. Read from NVML, /proc, /sys and lsblk; a source
this host lacks is reported as unknown (None), never as an error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpulease.agent.gpu.backend import GpuBackend


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpus(proc: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    models, sockets = set(), set()
    logical = 0
    for block in (_read(proc) or "").split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "processor" in fields:
            logical += 1
            models.add(fields.get("model name", "unknown"))
            sockets.add(fields.get("physical id", "0"))
    return {"models": sorted(models), "sockets": len(sockets) or None,
            "logical_cores": logical or os.cpu_count()}


def memory_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    return None


def _nvme_sanitize(path: str) -> dict[str, bool] | None:
    try:
        out = subprocess.run(["nvme", "id-ctrl", path, "--output-format=json"],
                             capture_output=True, text=True, timeout=30)
        ctrl = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        ctrl = None
    if ctrl is None:
        return None
    sanicap, fna = int(ctrl.get("sanicap", 0)), int(ctrl.get("fna", 0))
    return {"crypto_erase": bool(sanicap & 0x1), "block_erase": bool(sanicap & 0x2),
            "overwrite": bool(sanicap & 0x4), "format_crypto_erase": bool(fna & 0x4)}


def disks() -> list[dict[str, Any]]:
    try:
        out = subprocess.run(["lsblk", "--json", "--bytes", "--nodeps", "--output",
                              "PATH,SIZE,MODEL,SERIAL,TYPE,TRAN,ROTA"],
                             capture_output=True, text=True, timeout=30)
        devices = json.loads(out.stdout)["blockdevices"] if out.returncode == 0 else []
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return []
    found = []
    for d in devices:
        if d.get("type") != "disk":
            continue
        nvme = d.get("tran") == "nvme" or str(d.get("path", "")).startswith("/dev/nvme")
        found.append({"path": d.get("path"), "size_bytes": int(d.get("size") or 0),
                      "model": (d.get("model") or "").strip() or None,
                      "serial": (d.get("serial") or "").strip() or None,
                      "transport": d.get("tran"), "rotational": bool(d.get("rota")),
                      "nvme_sanitize": _nvme_sanitize(d["path"]) if nvme else None})
    return found


def nics(sys_net: Path = Path("/sys/class/net"),
         sys_ib: Path = Path("/sys/class/infiniband")) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for dev in sorted(sys_net.glob("*")) if sys_net.exists() else []:
        if dev.name == "lo" or not (dev / "device").exists():
            continue  # virtual interfaces (bridges, veth, docker0) are not NICs
        speed = _read(dev / "speed")
        found.append({"name": dev.name, "kind": "ethernet", "mac": _read(dev / "address"),
                      "state": _read(dev / "operstate"),
                      "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit()
                      and int(speed) > 0 else None})
    for hca in sorted(sys_ib.glob("*")) if sys_ib.exists() else []:
        for port in sorted((hca / "ports").glob("*")):
            found.append({"name": f"{hca.name}/{port.name}", "kind": "infiniband",
                          "rate": _read(port / "rate"), "state": _read(port / "state"),
                          "link_layer": _read(port / "link_layer"),
                          "firmware": _read(hca / "fw_ver")})
    return found


def host_inventory(backend: GpuBackend) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "simulated_gpus": backend.simulated,
        "gpus": [asdict(g) for g in backend.devices()],
        "driver_version": backend.driver_version(),
        "cuda_version": backend.cuda_version(),
        "cpus": cpus(),
        "memory_gib": memory_gib(),
        "disks": disks(),
        "nics": nics(),
    }
