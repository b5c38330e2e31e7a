"""The simulated backend and each injected fault give the right summaries and alerts."""

from __future__ import annotations

import pytest

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.domain.fleet.telemetry import AlertKind, ClockEvent, alerts_for, summarize


def run_window(gpus: SimulatedGpus, seconds: int, load: float = 1.0) -> Sampler:
    assert isinstance(gpus.clock, VirtualClock)
    gpus.load = load
    sampler = Sampler(gpus, interval_s=1.0, window_s=seconds + 10)
    for _ in range(seconds):
        sampler.sweep()
        gpus.clock.advance(1.0)
    return sampler


def kinds(sampler: Sampler) -> set[tuple[int, AlertKind]]:
    return {(a.gpu, a.kind) for a in alerts_for(sampler.summaries())}


def test_healthy_server_raises_nothing_and_says_simulated() -> None:
    sampler = run_window(SimulatedGpus(8, clock=VirtualClock()), 240)
    summaries = sampler.summaries()
    assert [g.index for g in summaries] == list(range(8))
    assert all(g.simulated and g.samples == 240 for g in summaries)
    assert all(g.thermal_throttle_s == 0 and not g.xids and g.nvlink_links == 18
               for g in summaries)
    assert all(g.energy_j and g.energy_j > 0 for g in summaries)  # counter moved
    assert kinds(sampler) == set()


@pytest.mark.parametrize(("fault", "expected"), [
    ("thermal:2", (2, AlertKind.THERMAL_THROTTLING)),
    ("xid79:5", (5, AlertKind.GPU_FELL_OFF_BUS)),
    ("nvlink-down:3:7", (3, AlertKind.NVLINK_DOWN)),
    ("ecc-dbe:1", (1, AlertKind.DOUBLE_BIT_ECC)),
    ("row-remap:6", (6, AlertKind.ROW_REMAP_FAILURE)),
    # XIDs by themselves, each its own kind (NVIDIA's XID catalogue)
    ("xid:1:48", (1, AlertKind.DOUBLE_BIT_ECC)),
    ("xid:2:94", (2, AlertKind.ECC_CONTAINED)),
    ("xid:4:95", (4, AlertKind.ECC_UNCONTAINED)),
    ("xid:3:74", (3, AlertKind.NVLINK_DOWN)),
    ("xid:6:64", (6, AlertKind.ROW_REMAP_FAILURE)),
])
def test_each_fault_raises_its_alert_on_its_gpu_only(
        fault: str, expected: tuple[int, AlertKind]) -> None:
    sampler = run_window(SimulatedGpus(8, faults=parse_faults([fault]), clock=VirtualClock()),
                         240)
    assert kinds(sampler) == {expected}


def test_an_xid_fault_names_its_xid_and_needs_one() -> None:
    with pytest.raises(ValueError, match="say which XID"):
        parse_faults(["xid:3"])
    sampler = run_window(SimulatedGpus(8, faults=parse_faults(["xid:2:94"]),
                                       clock=VirtualClock()), 240)
    (alert,) = alerts_for(sampler.summaries())
    assert alert.severity == "warning" and "XID 94" in alert.message


def test_thermal_fault_is_a_saw_tooth() -> None:
    gpus = SimulatedGpus(1, faults=parse_faults(["thermal"]), clock=VirtualClock(0.0))
    samples = run_window(gpus, 240).window.samples
    temps = [s.gpu_temp_c or 0 for s in samples]
    throttled = [bool(s.clocks_event_reasons & ClockEvent.HW_THERMAL_SLOWDOWN) for s in samples]
    # two teeth in 240 s: heating to ~91 °C, 30 s throttled with clocks down, cooling
    assert max(temps) >= 90 and min(temps) <= 71
    assert sum(throttled) == 60
    rises = sum(1 for a, b in zip(throttled, throttled[1:], strict=False) if b and not a)
    assert rises == 2
    clocks = {bool(t): s.sm_clock_mhz for t, s in zip(throttled, samples, strict=True)}
    assert (clocks[True] or 0) < (clocks[False] or 0)
    summary = summarize(samples)[0]
    assert summary.thermal_throttle_s == pytest.approx(60, abs=1)


def test_short_thermal_blip_is_not_sustained() -> None:
    sampler = run_window(SimulatedGpus(1, faults=parse_faults(["thermal"]),
                                       clock=VirtualClock(0.0)), 100)  # 10 s throttled
    assert kinds(sampler) == set()


def test_xid_is_reported_once_and_kept_as_last_xid() -> None:
    gpus = SimulatedGpus(2, faults=parse_faults(["xid79:1"]), clock=VirtualClock())
    first, second = gpus.sample(), gpus.sample()
    assert first[1].xids == (79,) and second[1].xids == ()
    assert second[1].last_xid == 79 and second[0].last_xid == 0


@pytest.mark.parametrize("bad", ["overheat", "thermal:x", "slow-gpu:0:fast"])
def test_bad_fault_specs_are_refused_with_the_known_kinds(bad: str) -> None:
    with pytest.raises(ValueError, match="thermal|KIND"):
        parse_faults([bad])


def test_fault_on_a_missing_gpu_is_refused() -> None:
    with pytest.raises(ValueError, match="GPUs 0-1"):
        SimulatedGpus(2, faults=parse_faults(["xid79:4"]))
