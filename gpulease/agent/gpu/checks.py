"""The acceptance suite's measurements. GPU checks use PyTorch (imported only here, only
when they run); fio runs for real wherever fio is installed; the burn-in samples the GPU
backend while the GPUs are loaded. domain/acceptance.judge turns the figures into a verdict.

With the simulated backend the GPU figures are produced from the spec sheet and the
injected faults, and the report says simulated."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpulease.agent.gpu.backend import GpuBackend
from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.domain.fleet.acceptance import (
    GpuSpec,
    Measurements,
    Report,
    Thresholds,
    h2d_floor_gbps,
    judge,
)
from gpulease.domain.fleet.telemetry import summarize

log = logging.getLogger("gpulease.agent")


class CheckError(RuntimeError):
    pass


# --- fio ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FioResult:
    iops: float
    bandwidth_mbps: float
    target: str
    fio_version: str


@dataclass(frozen=True)
class FioJob:
    """What one fio job reads: the access pattern, block size, queue depth, processes."""

    pattern: str
    block: str
    iodepth: int
    jobs: int


RANDOM_4K = FioJob(pattern="randread", block="4k", iodepth=64, jobs=8)
SEQUENTIAL_1M = FioJob(pattern="read", block="1M", iodepth=16, jobs=1)


def run_fio(target: str, job: FioJob, runtime_s: float, size: str | None = None) -> FioResult:
    """One read-only fio job (`--readonly`: fio refuses any write), parsed from its JSON."""
    fio = shutil.which("fio")
    if fio is None:
        raise CheckError("fio is not installed; install it (Debian/Ubuntu: apt install fio)")
    cmd = [fio, "--name=accept", f"--filename={target}", f"--rw={job.pattern}",
           f"--bs={job.block}", "--direct=1", "--ioengine=libaio", f"--iodepth={job.iodepth}",
           f"--numjobs={job.jobs}",
           f"--runtime={max(int(runtime_s), 1)}", "--time_based", "--group_reporting",
           "--readonly", "--output-format=json"]
    if size:
        cmd.append(f"--size={size}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=runtime_s + 120)
    if done.returncode != 0:
        raise CheckError(f"fio failed on {target}: {(done.stderr or done.stdout).strip()[:400]}")
    return parse_fio(done.stdout, target)


def parse_fio(output: str, target: str) -> FioResult:
    # fio may print notices before the JSON document.
    data = json.loads(output[output.index("{"):])
    read = data["jobs"][0]["read"]
    return FioResult(iops=float(read["iops"]), bandwidth_mbps=float(read["bw_bytes"]) / 1e6,
                     target=target, fio_version=str(data.get("fio version", "fio")))


def fio_checks(target: str, runtime_s: float = 10, size: str | None = None
               ) -> tuple[FioResult, FioResult]:
    """4k random read (direct, iodepth 64, 8 jobs) and 1 MiB sequential read."""
    rand = run_fio(target, RANDOM_4K, runtime_s, size)
    seq = run_fio(target, SEQUENTIAL_1M, runtime_s, size)
    return rand, seq


# --- GPU checks (PyTorch) ------------------------------------------------------------------

def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CheckError("PyTorch is not installed; install the agent with the gpu extra "
                         "(pip install 'gpulease[gpu]')") from None
    return torch


def _sync(torch: Any, device: Any) -> None:
    kind = getattr(device, "type", str(device))
    if kind.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif kind.startswith("npu"):  # Ascend: torch_npu adds torch.npu
        torch.npu.synchronize(device)


def _accelerator(device_type: str) -> None:
    """Make PyTorch speak the device: CUDA is built in; Ascend needs torch_npu."""
    _torch()
    if device_type == "npu":
        try:
            import torch_npu  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            raise CheckError("torch_npu (Ascend's PyTorch plugin, with CANN) is not "
                             "installed: the NPU checks cannot run") from None


def matmul_tflops(device: str, n: int = 8192, iters: int = 20) -> tuple[float, bool]:
    """bf16 matmul throughput, and whether every iteration gave the identical result (a
    deterministic kernel on healthy silicon does; a difference is silent data corruption)."""
    torch = _torch()
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    a = torch.randn(n, n, generator=gen, dtype=torch.float32).to(dev, torch.bfloat16)
    b = torch.randn(n, n, generator=gen, dtype=torch.float32).to(dev, torch.bfloat16)
    reference = torch.matmul(a, b)  # warm-up and the checksum reference
    ref_sum = reference.float().sum().item()
    _sync(torch, dev)
    consistent = True
    start = time.perf_counter()
    for _ in range(iters):
        c = torch.matmul(a, b)
    _sync(torch, dev)
    elapsed = time.perf_counter() - start
    for _ in range(3):  # checksums outside the timed loop
        c = torch.matmul(a, b)
        consistent &= c.float().sum().item() == ref_sum
    return 2 * n**3 * iters / elapsed / 1e12, consistent


def hbm_gbps(device: str, mib: int = 1024, iters: int = 20) -> float:
    """Device memory bandwidth: a copy and an elementwise kernel; the higher one counts
    (each moves the buffer twice: one read, one write)."""
    torch = _torch()
    dev = torch.device(device)
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * 4 * iters
    best = 0.0
    ops: tuple[Callable[[], Any], ...] = (lambda: dst.copy_(src),
                                          lambda: torch.add(src, 1.0, out=dst))
    for op in ops:
        op()
        _sync(torch, dev)
        start = time.perf_counter()
        for _ in range(iters):
            op()
        _sync(torch, dev)
        best = max(best, moved / (time.perf_counter() - start) / 1e9)
    return best


def host_copy_gbps(device: str, mib: int = 1024, iters: int = 10) -> tuple[float, float]:
    """Pinned host→device and device→host bandwidth of one GPU."""
    torch = _torch()
    dev = torch.device(device)
    pinned = dev.type in ("cuda", "npu")
    host = torch.empty(mib * 2**20, dtype=torch.uint8, pin_memory=pinned)
    gpu = torch.empty(mib * 2**20, dtype=torch.uint8, device=dev)
    rates = []
    copies: tuple[Callable[[], Any], ...] = (lambda: gpu.copy_(host, non_blocking=True),
                                             lambda: host.copy_(gpu, non_blocking=True))
    for copy in copies:
        copy()
        _sync(torch, dev)
        start = time.perf_counter()
        for _ in range(iters):
            copy()
        _sync(torch, dev)
        rates.append(mib * 2**20 * iters / (time.perf_counter() - start) / 1e9)
    return rates[0], rates[1]


def host_copy_all_gbps(devices: Sequence[str], mib: int = 512, iters: int = 5) -> float:
    """Host→device into every GPU at once (one CUDA stream each): the host side's ceiling."""
    torch = _torch()
    devs = [torch.device(d) for d in devices]
    hosts = [torch.empty(mib * 2**20, dtype=torch.uint8,
                         pin_memory=d.type in ("cuda", "npu")) for d in devs]
    gpus = [torch.empty(mib * 2**20, dtype=torch.uint8, device=d) for d in devs]
    for d in devs:
        _sync(torch, d)
    start = time.perf_counter()
    for _ in range(iters):
        for h, g in zip(hosts, gpus, strict=True):
            g.copy_(h, non_blocking=True)
    for d in devs:
        _sync(torch, d)
    return len(devs) * mib * 2**20 * iters / (time.perf_counter() - start) / 1e9


def p2p_matrix_gbps(devices: Sequence[str], mib: int = 256, iters: int = 5
                    ) -> list[list[float | None]]:
    """GPU i → GPU j copy bandwidth for every ordered pair."""
    torch = _torch()
    bufs = [torch.empty(mib * 2**20, dtype=torch.uint8, device=d) for d in devices]
    matrix: list[list[float | None]] = []
    for i, src in enumerate(bufs):
        row: list[float | None] = []
        for j, dst in enumerate(bufs):
            if i == j:
                row.append(None)
                continue
            dst.copy_(src)
            _sync(torch, dst.device)
            start = time.perf_counter()
            for _ in range(iters):
                dst.copy_(src)
            _sync(torch, dst.device)
            _sync(torch, src.device)
            row.append(mib * 2**20 * iters / (time.perf_counter() - start) / 1e9)
        matrix.append(row)
    return matrix


@dataclass(frozen=True)
class AllReduceRun:
    """One all-reduce measurement: processes, the rendezvous port on loopback, the bytes
    each reduces, timed iterations, and the collective backend (nccl, hccl, gloo)."""

    world: int
    port: int
    nbytes: int
    iters: int
    backend: str


def _allreduce_worker(rank: int, run: AllReduceRun, result: Any) -> None:
    torch = _torch()
    world, nbytes, backend = run.world, run.nbytes, run.backend
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{run.port}",
                            rank=rank, world_size=world)
    kind = {"nccl": "cuda", "hccl": "npu"}.get(backend)
    if kind == "npu":
        import torch_npu  # noqa: F401
    device = torch.device(f"{kind}:{rank}" if kind else "cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
    elif kind == "npu":
        torch.npu.set_device(device)
    t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    for _ in range(3):
        dist.all_reduce(t)
    _sync(torch, device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(run.iters):
        dist.all_reduce(t)
    _sync(torch, device)
    elapsed = (time.perf_counter() - start) / run.iters
    if rank == 0:
        algbw = nbytes / elapsed / 1e9
        result.value = algbw * 2 * (world - 1) / world  # busbw, as nccl-tests reports it
    dist.destroy_process_group()


def allreduce_busbw_gbps(world: int, nbytes: int = 2**30, iters: int = 10,
                         backend: str = "nccl") -> float:
    """All-reduce bus bandwidth across `world` local GPUs (one process each)."""
    _torch()  # fail here, with the install hint, rather than in every child process
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_allreduce_worker,
                         args=(r, AllReduceRun(world, port, nbytes, iters, backend), result))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    if any(p.exitcode != 0 for p in procs):
        raise CheckError(f"all-reduce failed: exit codes {[p.exitcode for p in procs]}")
    return float(result.value)


# --- the suite ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SuiteOptions:
    fio_target: str | None = None  # a data-disk device or file; None: skip fio
    fio_size: str | None = None  # for a file target
    fio_runtime_s: float = 10
    burnin_s: float | None = None  # None: the offer's threshold
    sample_interval_s: float = 1.0
    matmul_n: int = 8192
    allreduce_bytes: int = 2**30


def _burnin(backend: GpuBackend, seconds: float, interval: float,
            load: Callable[[], None] | None) -> Sampler:
    sampler = Sampler(backend, interval_s=interval, window_s=seconds + 60)
    if isinstance(backend, SimulatedGpus):
        backend.load = 1.0
        if isinstance(backend.clock, VirtualClock):  # simulated time: no waiting
            for _ in range(int(seconds / interval) + 1):
                sampler.sweep()
                backend.clock.advance(interval)
            backend.load = 0.0
            return sampler
    deadline = time.monotonic() + seconds
    try:
        while True:
            sampler.sweep()
            if time.monotonic() >= deadline:
                break
            if load is not None:
                load()
            time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
    finally:
        if isinstance(backend, SimulatedGpus):
            backend.load = 0.0
    return sampler


def _simulated_gpu_figures(backend: SimulatedGpus, spec: GpuSpec,
                           thresholds: Thresholds) -> dict[str, Any]:
    """Figures a healthy GPU of this spec would give, scaled by the injected faults."""
    n = backend.count
    speeds = [backend.speed(i) for i in range(n)]
    links_ok = all(all(backend.nvlink_up(i)) for i in range(n))
    busbw = (thresholds.allreduce_busbw_gbps or 100.0) * 1.15
    if not links_ok:
        busbw *= 0.4  # a link down drops NCCL to a slower path (PRODUCT.md: 100–200 GB/s)
    busbw *= min(speeds) if min(speeds) > 0 else 0.0
    h2d = h2d_floor_gbps(spec.pcie_gen) * 1.25
    return {
        "matmul_tflops": [spec.matmul_ceiling_tflops * 0.98 * s for s in speeds],
        "matmul_checksums_consistent": [s > 0 for s in speeds],
        "hbm_gbps": [spec.memory_bandwidth_gbps * 0.9 * s for s in speeds],
        "h2d_gbps": [h2d * (1 if s > 0 else 0) for s in speeds],
        "d2h_gbps": [h2d * (1 if s > 0 else 0) for s in speeds],
        "h2d_all_gbps": h2d * n * 0.6,
        "responding": [s > 0 for s in speeds],
        "allreduce_busbw_gbps": busbw if n > 1 else None,
        "allreduce_bytes": 2**30 if n > 1 else None,
    }


SIMULATED_DISK = {"fio_randread_iops": 420_000.0, "fio_seqread_mbps": 6_500.0}


def _real_gpu_figures(backend: GpuBackend, options: SuiteOptions) -> dict[str, Any]:
    """Each GPU measured on its own: one that fails in CUDA (off the bus, say) is marked
    not responding and the rest are still measured; the checks that need every GPU
    (peer-to-peer, all-reduce) run only when all respond."""
    kind = getattr(backend, "device_type", "cuda")
    _accelerator(kind)
    devices = [f"{kind}:{g.index}" for g in backend.devices()]
    responding: list[bool] = []
    mm: list[tuple[float, bool]] = []
    hbm: list[float] = []
    copies: list[tuple[float, float]] = []
    for d in devices:
        try:
            figures_of_one = (matmul_tflops(d, options.matmul_n), hbm_gbps(d),
                              host_copy_gbps(d))
        except CheckError:
            raise  # no PyTorch or no CUDA: nothing can be measured here
        except Exception as exc:
            log.warning("%s does not respond: %s", d, exc)
            responding.append(False)
            mm.append((0.0, False))
            hbm.append(0.0)
            copies.append((0.0, 0.0))
            continue
        responding.append(True)
        mm.append(figures_of_one[0])
        hbm.append(figures_of_one[1])
        copies.append(figures_of_one[2])
    live = [d for d, ok in zip(devices, responding, strict=True) if ok]
    figures: dict[str, Any] = {
        "matmul_tflops": [t for t, _ in mm],
        "matmul_checksums_consistent": [ok for _, ok in mm],
        "hbm_gbps": hbm,
        "h2d_gbps": [h for h, _ in copies],
        "d2h_gbps": [d for _, d in copies],
        "h2d_all_gbps": host_copy_all_gbps(live) if live else None,
        "responding": responding,
    }
    if len(devices) > 1 and len(live) == len(devices):
        figures["p2p_gbps"] = p2p_matrix_gbps(devices)
        figures["allreduce_busbw_gbps"] = allreduce_busbw_gbps(
            len(devices), options.allreduce_bytes,
            backend="hccl" if kind == "npu" else "nccl")
        figures["allreduce_bytes"] = options.allreduce_bytes
    return figures


def run_suite(backend: GpuBackend, thresholds: Thresholds, spec: GpuSpec,
              options: SuiteOptions = SuiteOptions()) -> Report:
    """Measure everything this node can measure, then judge it."""
    notes: list[str] = []
    gpus = backend.devices()
    figures: dict[str, Any] = {}
    load: Callable[[], None] | None = None
    if backend.simulated:
        assert isinstance(backend, SimulatedGpus)
        figures = _simulated_gpu_figures(backend, spec, thresholds)
        notes.append("GPU figures are SIMULATED from the spec sheet and injected faults")
    else:
        try:
            figures = _real_gpu_figures(backend, options)
            kind = getattr(backend, "device_type", "cuda")
            devices = [f"{kind}:{g.index}" for g in gpus]

            def load() -> None:
                for d in devices:
                    matmul_tflops(d, n=4096, iters=5)
        except CheckError as exc:
            notes.append(f"GPU checks not run: {exc}")
    fio_target = options.fio_target
    if fio_target:
        try:
            rand, seq = fio_checks(fio_target, options.fio_runtime_s, options.fio_size)
            figures["fio_randread_iops"] = rand.iops
            figures["fio_seqread_mbps"] = seq.bandwidth_mbps
            notes.append(f"disk checks by {rand.fio_version}")
        except CheckError as exc:
            notes.append(f"fio not run: {exc}")
    elif backend.simulated:
        figures.update(SIMULATED_DISK)
        notes.append("disk figures are SIMULATED (no data disk given)")
    else:
        notes.append("fio not run: no data disk given")
    seconds = options.burnin_s if options.burnin_s is not None else thresholds.burnin_s
    burnin = summarize(_burnin(backend, seconds, options.sample_interval_s, load)
                       .window.samples) if seconds > 0 else []
    m = Measurements(gpu_count=len(gpus), burnin=tuple(burnin), fio_target=fio_target,
                     driver_version=backend.driver_version(),
                     cuda_version=backend.cuda_version(), simulated=backend.simulated,
                     notes=tuple(notes))
    return judge(replace(m, **figures), thresholds, spec)


def simulated_node_report(node: str, faults: Sequence[str], thresholds: Thresholds,
                          spec: GpuSpec) -> Report:
    """The acceptance report of a simulated server (the demo fleet, tests): the full suite
    over simulated GPUs in virtual time, with the node's injected GPU faults."""
    from gpulease.agent.gpu.simulated import MODELS, parse_faults

    backend = SimulatedGpus(count=spec.count or 8,
                            model=spec.gpu_id if spec.gpu_id in MODELS else "h100-80g",
                            faults=parse_faults(faults), clock=VirtualClock(),
                            hostname_seed=node)
    return run_suite(backend, thresholds, spec, SuiteOptions(sample_interval_s=1.0))
