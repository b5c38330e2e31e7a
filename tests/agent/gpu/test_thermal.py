"""Thermal throttling caught every time: the simulated saw-tooth (90 s heating from 70 to
91 °C, 30 s throttled) fails the burn-in whatever phase a 5 s, 60 s or default burn-in
starts in, while a healthy GPU passes; the rules on their own with hand-made samples (a
ceiling per SKU, slowdown at any one sample, a climb that would reach the ceiling, a
warm-up that levels off below it); and a GPU off the bus is "not responding (XID 79)"."""

from __future__ import annotations

import math

import pytest

from gpulease.agent.gpu.checks import SuiteOptions, run_suite, simulated_node_report
from gpulease.agent.gpu.simulated import THERMAL_PERIOD_S, SimulatedGpus, VirtualClock, parse_faults
from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.acceptance import Measurements, Thresholds, _burnin, judge
from gpulease.domain.fleet.telemetry import ClockEvent, GpuSample, summarize
from tests.agent.gpus import h100_marks

CYCLE_START = 1.7e9 - 1.7e9 % THERMAL_PERIOD_S


@pytest.mark.parametrize("burnin_s", [5.0, 60.0, 180.0])
def test_the_saw_tooth_is_caught_in_every_phase_and_a_healthy_gpu_passes(burnin_s: float
                                                                         ) -> None:
    t, spec = h100_marks()
    for phase in range(0, int(THERMAL_PERIOD_S), 2):
        gpus = SimulatedGpus(count=2, model="h100-80g", faults=parse_faults(["thermal:1"]),
                             clock=VirtualClock(CYCLE_START + phase))
        report = run_suite(gpus, t, spec, SuiteOptions(burnin_s=burnin_s))
        healthy, hot = (c for c in report.checks if c.name == "burnin")
        assert healthy.passed, (phase, healthy.detail)
        assert hot.passed is False, (phase, hot.detail)


def test_the_default_burn_in_sees_a_whole_cycle() -> None:
    t, spec = h100_marks()
    assert t.burnin_s >= 1.5 * THERMAL_PERIOD_S
    report = simulated_node_report("n1", ["thermal:5"], t, spec)
    (hot,) = (c for c in report.checks if c.name == "burnin" and c.gpu == 5)
    assert hot.passed is False and "thermal slowdown" in hot.detail
    assert "ceiling 87 °C" in hot.detail


def _samples(temps: list[float], every_s: float = 1.0, bits: dict[int, int] | None = None,
             memory: float | None = None) -> list[GpuSample]:
    return [GpuSample(index=0, uuid="GPU-0", name="H100", at=1000 + i * every_s,
                      gpu_temp_c=temp, memory_temp_c=memory, sm_clock_mhz=1980,
                      clocks_event_reasons=(bits or {}).get(i, 0))
            for i, temp in enumerate(temps)]


def _verdict(samples: list[GpuSample], t: Thresholds | None = None) -> tuple[bool | None, str]:
    (check,) = _burnin(Measurements(gpu_count=1, burnin=tuple(summarize(samples))),
                       t or Thresholds(gpu_temp_max_c=87, memory_temp_max_c=95))
    return check.passed, check.detail


def test_ceilings_slowdowns_and_climbs() -> None:
    steady = [72 + 0.3 * math.sin(i) for i in range(60)]
    assert _verdict(_samples(steady))[0] is True
    assert _verdict(_samples([80, 84, 87.2, 86]))[1].startswith("GPU at 87 °C")
    assert "memory at 96 °C" in _verdict(_samples(steady, memory=96))[1]
    # slowdown in one sample, even the last (no time attributed to it)
    last = _samples(steady, bits={59: int(ClockEvent.HW_THERMAL_SLOWDOWN)})
    assert "thermal slowdown in 1 sample" in _verdict(last)[1]
    brake = _samples(steady, bits={30: int(ClockEvent.HW_POWER_BRAKE_SLOWDOWN)})
    assert "power-brake slowdown in 1 sample" in _verdict(brake)[1]
    capped = _samples(steady, bits={30: int(ClockEvent.SW_POWER_CAP)})
    assert _verdict(capped)[0] is True  # holding the power limit is normal under load
    # 0.25 °C/s from 70 °C: the ceiling within a burn-in's length, though 71 °C now
    climbing = [70 + 0.25 * i for i in range(5)]
    passed, detail = _verdict(_samples(climbing))
    assert passed is False and "heating 15.0 °C/min" in detail, detail


def test_a_warm_up_that_levels_off_below_the_ceiling_passes_and_above_it_fails() -> None:
    def warm_up(settle: float) -> list[float]:  # a GPU from idle, time constant 40 s
        return [settle - (settle - 35) * math.exp(-i / 40) for i in range(60)]

    assert _verdict(_samples(warm_up(78)))[0] is True
    passed, detail = _verdict(_samples(warm_up(96)))
    assert passed is False and "heating" in detail


def test_each_sku_has_its_ceilings_from_the_catalog() -> None:
    catalog = load_catalog()
    marks = {o.sku: catalog.acceptance_for(o)[0] for o in catalog.offers}
    assert (marks["h100-80g-x8"].gpu_temp_max_c, marks["h100-80g-x8"].memory_temp_max_c) == (
        87, 95)
    assert marks["a100-80g-x8"].gpu_temp_max_c == 85
    assert marks["rtx4090-24g-x8"].gpu_temp_max_c == 90


def test_a_gpu_off_the_bus_is_not_responding_and_its_checksums_are_not_judged() -> None:
    t, spec = h100_marks()
    report = simulated_node_report("n1", ["xid79:6"], t, spec)
    (silent,) = (c for c in report.checks if c.name == "gpu_responding")
    assert silent.gpu == 6 and silent.detail == "not responding (XID 79: fell off the bus)"
    assert not [c for c in report.checks if c.name == "matmul_checksum" and c.gpu == 6]
    assert "silent data corruption" not in report.summary()
    others = [c for c in report.checks if c.name == "matmul_bf16" and c.gpu != 6]
    assert all(c.passed for c in others)  # the median is of the GPUs that ran
    no_xid = judge(Measurements(gpu_count=2, matmul_tflops=[0.0, 780.0],
                                matmul_checksums_consistent=[False, True],
                                responding=[False, True]), t, spec)
    assert [c.detail for c in no_xid.checks if c.name == "gpu_responding"] == [
        "not responding (no XID reported)"]
