"""The GPU run kit (scripts/gpu-check.sh): on a machine with an NVIDIA GPU, the acceptance
suite with NVML and CUDA, one scrape of the agent's /metrics over HTTP, and the figures
beside the published ceilings, into one JSON file. Needs only Python, PyTorch and
nvidia-ml-py (what a GPU image carries): the catalog is read with tomllib, not through the
control plane. `--dry-run` does the same on the simulated backend in virtual time, anywhere.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpulease.agent.gpu.backend import GpuBackend
from gpulease.agent.gpu.checks import SuiteOptions, run_suite
from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.agent.server import AgentServer, AgentState
from gpulease.domain.fleet.acceptance import GpuSpec, Report, Thresholds

CATALOG = Path(__file__).resolve().parents[2] / "data" / "catalog.toml"
# Ceilings others published, to read the figures against (docs/acceptance.md): the
# maximum achievable bf16 matmul (MAMF) measured on this chip, the datasheet's memory
# bandwidth, and what a PCIe Gen5 ×16 link carries host to device in practice.
PUBLISHED = {
    "h200-141g": {"matmul_bf16_tflops": 795.0, "hbm_gbps": 4800.0, "h2d_gbps": 55.0},
    "h100-80g": {"matmul_bf16_tflops": 795.0, "hbm_gbps": 3350.0, "h2d_gbps": 55.0},
    "a100-80g": {"matmul_bf16_tflops": 280.0, "hbm_gbps": 2039.0, "h2d_gbps": 25.0},
    "a800-80g": {"matmul_bf16_tflops": 280.0, "hbm_gbps": 2039.0, "h2d_gbps": 25.0},
}


def catalog_gpu(name: str) -> dict[str, Any]:
    """The catalog's [[gpus]] entry for an NVML device name ("NVIDIA H200" → h200-141g)."""
    gpus = tomllib.loads(CATALOG.read_text(encoding="utf-8"))["gpus"]
    text = name.lower().replace("-", " ")
    for gpu in gpus:
        model = gpu["id"].split("-")[0]  # h200, h100, a100, rtx4090…
        if model.removeprefix("rtx") in text.replace("geforce rtx ", ""):
            return dict(gpu)
    return dict(gpus[0])


def spec_for(gpu: dict[str, Any], count: int) -> GpuSpec:
    dense = float(gpu["bf16_dense_tflops"])
    return GpuSpec(name=str(gpu["name"]), bf16_dense_tflops=dense,
                   matmul_ceiling_tflops=float(gpu.get("measured_bf16_matmul_tflops")
                                               or dense * 0.8),
                   memory_bandwidth_gbps=float(gpu["memory_bandwidth_tbps"]) * 1000,
                   pcie_gen=int(gpu["pcie_gen"]), gpu_id=str(gpu["id"]), count=count)


def scrape(backend: GpuBackend) -> tuple[str, float]:
    """One GET of /metrics from the agent's own HTTP server on loopback."""
    sampler = Sampler(backend, interval_s=0.5)
    sampler.sweep()
    state = AgentState(backend, sampler, hostname=platform.node() or "gpu-check",
                       backend_name="nvml")
    server = AgentServer(state, "127.0.0.1", 0)
    server.start()
    try:
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics",
                                    timeout=10) as r:
            text = r.read().decode()
        return text, time.perf_counter() - started
    finally:
        server.stop()


def nvidia_smi() -> str | None:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    done = subprocess.run([tool, "-q", "-d", "TEMPERATURE,CLOCK,POWER,PERFORMANCE"],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.stdout


def figures(report: Report) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for check in report.checks:
        if check.gpu is not None and check.unit in ("TFLOP/s", "GB/s"):
            out.setdefault(check.name, []).append(check.value)
    return out


def against(measured: dict[str, list[float | None]], gpu_id: str) -> dict[str, Any]:
    ceilings = PUBLISHED.get(gpu_id, {})
    pairs = {"matmul_bf16": "matmul_bf16_tflops", "hbm_bandwidth": "hbm_gbps",
             "host_to_device": "h2d_gbps"}
    out = {}
    for check, key in pairs.items():
        values = [v for v in measured.get(check, []) if v is not None]
        if values and key in ceilings:
            best = max(values)
            out[check] = {"measured_max": round(best, 1), "published": ceilings[key],
                          "share": round(best / ceilings[key], 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__)
    parser.add_argument("--out", default="gpu-check-out", help="folder for the results")
    parser.add_argument("--burnin", type=float, default=120.0,
                        help="burn-in seconds (default 120: the kit fits in 8 minutes)")
    parser.add_argument("--dry-run", action="store_true",
                        help="simulated GPUs in virtual time: checks the kit, not a GPU")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    backend: GpuBackend
    if args.dry_run:
        backend = SimulatedGpus(count=1, model="h200-141g", clock=VirtualClock(),
                                hostname_seed="gpu-check")
    else:
        from gpulease.agent.gpu.nvml import NvmlBackend
        backend = NvmlBackend()
    devices = backend.devices()
    gpu = catalog_gpu(devices[0].name if devices else "")
    spec = spec_for(gpu, len(devices))
    thresholds = replace(Thresholds(), burnin_s=args.burnin)
    torch_version = None
    if not args.dry_run:
        import torch  # the GPU checks' own dependency; present on a GPU image
        torch_version = str(torch.__version__)
    report = run_suite(backend, thresholds, spec, SuiteOptions(burnin_s=args.burnin))
    page, scrape_s = scrape(backend)
    (out / "metrics.txt").write_text(page)
    smi = nvidia_smi()
    if smi:
        (out / "nvidia-smi.txt").write_text(smi)
    measured = figures(report)
    series = sorted({line.split("{")[0].split(" ")[0] for line in page.splitlines()
                     if line and not line.startswith("#")})
    result = {
        "kit": "gpulease gpu-check", "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "dry_run": args.dry_run, "gpus": [d.name for d in devices],
        "catalog_gpu": gpu["id"], "driver": backend.driver_version(),
        "cuda": backend.cuda_version(), "torch": torch_version,
        "python": sys.version.split()[0], "burnin_s": args.burnin,
        "passed": report.passed, "failures": [
            {"check": c.name, "gpu": c.gpu, "detail": c.detail} for c in report.failures],
        "figures": measured, "against_published": against(measured, str(gpu["id"])),
        "metrics": {"series": len(series), "names": series, "bytes": len(page),
                    "scrape_s": round(scrape_s, 4)},
        "report": report.as_dict(), "elapsed_s": round(time.perf_counter() - started, 1),
    }
    (out / "gpu-check.json").write_text(json.dumps(result, indent=2))
    print(report.summary())
    print(json.dumps({k: result[k] for k in ("gpus", "driver", "cuda", "passed",
                                             "against_published", "elapsed_s")}, indent=2))
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
