"""Ascend 910B through npu-smi: the parsers against recorded outputs (tests/agent/npu_smi/,
written from the layout of Huawei's npu-smi reference: an Atlas 800T A2 with eight 910B3,
one of them hot and in Alarm, one with an HBM double-bit error), the backend over them,
its /metrics under npu-exporter's names, the burn-in and alerts judging the NPU's own
health, and the simulated 910B's faults."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulease.agent.gpu.backend import BackendUnavailable
from gpulease.agent.gpu.backends import open_backend
from gpulease.agent.gpu.checks import simulated_node_report
from gpulease.agent.gpu.metrics import Host, render
from gpulease.agent.gpu.npu_smi import NpuSmiBackend, parse_fields, parse_info
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.acceptance import Measurements, Thresholds, _burnin
from gpulease.domain.fleet.telemetry import AlertKind, alerts_for, summarize

RECORDED = Path(__file__).parent / "npu_smi"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


class Recorded:
    """npu-smi as a runner: the recorded output for each command line."""

    def __init__(self, info: str = "info.txt") -> None:
        self.info = info
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, args: Sequence[str]) -> str:
        self.calls.append(tuple(args))
        if list(args) == ["info"]:
            return recorded(self.info)
        if args[:3] == ["info", "-t", "ecc"]:
            return recorded("ecc_3.txt" if args[-1] == "3" else "ecc_0.txt")
        if args[:3] == ["info", "-t", "board"]:
            return recorded("board_0.txt").replace("C1:00.0", f"{args[-1]}:00.0")
        raise AssertionError(f"unexpected npu-smi {args}")


def test_the_info_table_reads_every_npu() -> None:
    npus, version = parse_info(recorded("info.txt"))
    assert version == "23.0.rc3" and [n.npu for n in npus] == list(range(8))
    hot = npus[3]
    assert (hot.name, hot.health, hot.power_w, hot.temp_c, hot.bus_id, hot.aicore_pct,
            hot.hbm_used_mb, hot.hbm_total_mb) == ("910B3", "Alarm", 388.2, 91.0,
                                                   "0000:02:00.0", 98.0, 61022.0, 65536.0)
    old, old_version = parse_info(recorded("info_na.txt"))
    assert old_version == "22.0.4" and (old[0].power_w, old[0].temp_c) == (None, None)
    assert old[0].hbm_total_mb == 65536.0  # what it could read, it says
    fields = parse_fields(recorded("ecc_3.txt"))
    assert fields["HBM Double Bit Error Count"] == "1"


def test_the_backend_samples_health_heat_hbm_and_ecc() -> None:
    runner = Recorded()
    backend = NpuSmiBackend(runner=runner, ecc_every=5, clock=lambda: 1000.0)
    devices = backend.devices()
    assert [d.name for d in devices] == ["Ascend 910B3"] * 8
    assert (devices[3].pci_bus_id, devices[3].memory_mib) == ("0000:02:00.0", 65536)
    first = backend.sample()
    assert (first[3].health, first[3].gpu_temp_c, first[3].power_w, first[3].gpu_util_pct,
            first[3].fb_used_mib, first[3].fb_free_mib) == ("Alarm", 91.0, 388.2, 98.0,
                                                            61022.0, 4514.0)
    assert (first[3].ecc_sbe_volatile, first[3].ecc_dbe_volatile) == (2, 1)
    for _ in range(4):
        backend.sample()
    ecc_reads = [c for c in runner.calls if c[:3] == ("info", "-t", "ecc")]
    assert len(ecc_reads) == 8  # once for the five sweeps, per NPU
    assert backend.driver_version() == "23.0.rc3" and backend.cuda_version() is None


def test_metrics_carry_npu_exporter_names_and_health() -> None:
    backend = NpuSmiBackend(runner=Recorded(), clock=lambda: 1000.0)
    bus = {d.index: d.pci_bus_id or "" for d in backend.devices()}
    page = render(backend.sample(), Host("atlas-1", "npu-smi", backend.driver_version(), None,
                                         bus_ids=bus))
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert {"npu_chip_info_temperature", "npu_chip_info_power", "npu_chip_info_utilization",
            "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_total_memory",
            "npu_chip_info_health_status", "gpulease_npu_hbm_ecc_double_bit_errors"
            } <= set(families)
    health = {s.labels["id"]: s.value for s in families["npu_chip_info_health_status"].samples}
    assert health["3"] == 0.0 and health["0"] == 1.0
    temp = families["npu_chip_info_temperature"].samples[3]
    assert temp.labels == {"id": "3", "model_name": "Ascend 910B3",
                           "UUID": "NPU-0000:02:00.0", "pci_bus_id": "0000:02:00.0",
                           "Hostname": "atlas-1"}
    assert "DCGM_FI_DEV_GPU_TEMP" not in page


def test_an_npu_in_alarm_fails_the_burn_in_and_raises_an_alert() -> None:
    backend = NpuSmiBackend(runner=Recorded(), clock=lambda: 1000.0)
    summaries = summarize(backend.sample())
    marks = Thresholds(gpu_temp_max_c=85, memory_temp_max_c=95)
    checks = _burnin(Measurements(gpu_count=8, burnin=tuple(summaries)), marks)
    failed = {c.gpu: c.detail for c in checks if c.passed is False}
    assert set(failed) == {3}
    assert "health as Alarm" in failed[3] and "GPU at 91 °C" in failed[3]
    kinds = {(a.kind, a.gpu) for a in alerts_for(summaries)}
    assert (AlertKind.DEVICE_UNHEALTHY, 3) in kinds


def test_the_simulated_910b_covers_its_faults() -> None:
    catalog = load_catalog()
    offer = next(o for o in catalog.offers if o.sku == "ascend910b-64g-x8")
    marks, spec = catalog.acceptance_for(offer)
    assert simulated_node_report("a1", [], marks, spec).passed
    for fault, words in (("unhealthy:2", "health as Alarm"), ("xid79:2", "health as Critical"),
                         ("ecc-dbe:2", "double-bit ECC"), ("thermal:2", "thermal slowdown")):
        report = simulated_node_report("a1", [fault], marks, spec)
        (burnin,) = (c for c in report.checks if c.name == "burnin" and c.gpu == 2)
        assert burnin.passed is False and words in burnin.detail, (fault, burnin.detail)
    gpus = SimulatedGpus(2, model="ascend910b-64g", clock=VirtualClock())
    page = render(gpus.sample(), Host("sim", "simulated"))
    assert "npu_chip_info_health_status" in page and gpus.device_type == "npu"


def test_npu_smi_missing_says_where_it_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendUnavailable, match="npu-smi is not installed"):
        open_backend("npu-smi")
