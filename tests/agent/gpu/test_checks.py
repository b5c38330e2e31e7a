"""The acceptance suite: judging, the simulated verdicts per fault, fio for real, and the
GPU check code run on the CPU build of PyTorch at small sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from gpulease.agent.gpu import checks
from gpulease.agent.gpu.checks import SuiteOptions, run_suite, simulated_node_report
from gpulease.domain.fleet.acceptance import Measurements, judge
from tests.agent.gpus import h100_marks, sim


def failed(report: object) -> set[tuple[str, int | None]]:
    return {(c.name, c.gpu) for c in report.failures}  # type: ignore[attr-defined]


def test_healthy_simulated_node_passes_and_says_simulated() -> None:
    t, spec = h100_marks()
    report = simulated_node_report("n1", [], t, spec)
    assert report.passed and report.simulated
    data = report.as_dict()
    assert data["simulated"] is True and "SIMULATED" in data["summary"]
    names = {c["name"] for c in data["checks"]}
    assert {"gpu_count", "matmul_bf16", "hbm_bandwidth", "host_to_device", "allreduce_busbw",
            "fio_randread_4k", "burnin"} <= names
    json.dumps(data)  # storable as is


@pytest.mark.parametrize(("fault", "must_fail"), [
    ("slow-gpu:3", {("matmul_bf16", 3), ("hbm_bandwidth", 3), ("allreduce_busbw", None)}),
    ("nvlink-down:0", {("allreduce_busbw", None), ("burnin", 0)}),
    ("thermal:5", {("burnin", 5)}),
    ("xid79:6", {("gpu_responding", 6), ("burnin", 6)}),
    ("ecc-dbe:2", {("burnin", 2)}),
])
def test_each_fault_fails_the_right_checks(fault: str, must_fail: set[tuple[str, int | None]]
                                           ) -> None:
    t, spec = h100_marks()
    report = simulated_node_report("n1", [fault], t, spec)
    assert not report.passed
    assert must_fail <= failed(report), report.summary()
    # every failure is on the faulty GPU or node-wide
    gpu = int(fault.split(":")[1])
    assert {g for _, g in failed(report)} <= {gpu, None}


def test_judging_thresholds_and_spread() -> None:
    t, spec = h100_marks()
    base = Measurements(gpu_count=8, matmul_tflops=[780.0] * 8,
                        matmul_checksums_consistent=[True] * 8, hbm_gbps=[3000.0] * 8,
                        allreduce_busbw_gbps=365.0, fio_randread_iops=150_000)
    assert judge(base, t, spec).passed
    # 8×H100 at 150 GB/s busbw: NVLink not in use (PRODUCT.md)
    assert failed(judge(replace(base, allreduce_busbw_gbps=150.0), t, spec)) == {
        ("allreduce_busbw", None)}
    # a GPU above the floor but 7 % off the median still fails (within-5 % rule)
    uneven = replace(base, matmul_tflops=[780.0] * 7 + [725.0])
    assert failed(judge(uneven, t, spec)) == {("matmul_bf16", 7)}
    corrupt = replace(base, matmul_checksums_consistent=[True] * 7 + [False])
    assert ("matmul_checksum", 7) in failed(judge(corrupt, t, spec))
    assert failed(judge(replace(base, fio_randread_iops=60_000), t, spec)) == {
        ("fio_randread_4k", None)}
    assert failed(judge(replace(base, gpu_count=7, matmul_tflops=[780.0] * 7,
                                matmul_checksums_consistent=[True] * 7,
                                hbm_gbps=[3000.0] * 7), t, spec)) == {("gpu_count", None)}
    # Gen5 host link: 30 GB/s host→device is below the 40 GB/s floor
    assert failed(judge(replace(base, h2d_gbps=[30.0] * 8), t, spec)) == {
        ("host_to_device", i) for i in range(8)}


def test_missing_measurements_are_skipped_not_failed() -> None:
    t, spec = h100_marks()
    report = judge(Measurements(gpu_count=8), t, spec)
    assert report.passed
    assert {c.name for c in report.checks if c.passed is None} >= {"matmul_bf16", "burnin"}


@pytest.mark.usefixtures("need_fio")
def test_fio_runs_for_real_read_only(loop_device: Callable[[int], str]) -> None:
    dev = loop_device(128)
    with open(dev, "r+b") as f:
        f.write(b"\x5a" * 2**20)
    rand, seq = checks.fio_checks(dev, runtime_s=1)
    assert rand.iops > 0 and seq.bandwidth_mbps > 0 and rand.fio_version.startswith("fio-")
    with open(dev, "rb") as f:
        assert f.read(2**20) == b"\x5a" * 2**20  # --readonly: nothing written


@pytest.mark.usefixtures("need_fio")
def test_suite_with_fio_judges_a_real_disk(loop_device: Callable[[int], str]) -> None:
    t, spec = h100_marks()
    dev = loop_device(128)
    impossible = replace(t, fio_randread_iops=1e9)
    report = run_suite(sim(), impossible, spec, SuiteOptions(fio_target=dev, fio_runtime_s=1,
                                                             burnin_s=5))
    fio = next(c for c in report.checks if c.name == "fio_randread_4k")
    assert fio.passed is False and fio.value and fio.detail == dev
    assert any("disk checks by fio-" in n for n in report.notes)


def test_fio_output_with_a_notice_before_the_json_parses() -> None:
    doc = {"fio version": "fio-3.33", "jobs": [{"read": {"iops": 1234.5, "bw_bytes": 5e6}}]}
    result = checks.parse_fio("note: both iodepth >= 1 and synchronous I/O engine\n"
                              + json.dumps(doc), "/dev/x")
    assert result.iops == 1234.5 and result.bandwidth_mbps == 5.0


def test_gpu_check_code_runs_on_the_cpu_build_of_torch() -> None:
    tflops, consistent = checks.matmul_tflops("cpu", n=128, iters=2)
    assert tflops > 0 and consistent
    assert checks.hbm_gbps("cpu", mib=4, iters=2) > 0
    h2d, d2h = checks.host_copy_gbps("cpu", mib=4, iters=2)
    assert h2d > 0 and d2h > 0
    matrix = checks.p2p_matrix_gbps(["cpu", "cpu"], mib=4, iters=2)
    assert matrix[0][0] is None and (matrix[0][1] or 0) > 0
    assert checks.host_copy_all_gbps(["cpu", "cpu"], mib=4, iters=2) > 0


def test_allreduce_code_runs_across_processes_on_gloo() -> None:
    busbw = checks.allreduce_busbw_gbps(2, nbytes=2**20, iters=2, backend="gloo")
    assert busbw > 0


def test_cli_verify_json_and_exit_codes() -> None:
    base = [sys.executable, "-m", "gpulease.cli.main", "agent", "verify", "--backend",
            "simulated", "--gpus", "8", "--burnin", "2", "--json"]
    ok = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["passed"] is True
    bad = subprocess.run(base + ["--fault", "slow-gpu:1"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and json.loads(bad.stdout)["passed"] is False
    unknown = subprocess.run(base + ["--offer", "h100-80g-x8@mars"], capture_output=True,
                             text=True, timeout=120)
    assert unknown.returncode == 2 and "known:" in unknown.stderr


def test_control_plane_never_imports_torch() -> None:
    code = ("import sys, gpulease.server, gpulease.api.app, gpulease.worker.runner, "
            "gpulease.cli.main; assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
