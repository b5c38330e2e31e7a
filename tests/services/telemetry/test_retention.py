"""Telemetry retention: per-minute GPU summaries older than seven days become one summary
per GPU and hour, hourly ones older than ninety days go; SQLite and PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from gpulease.db.tables import Node, TelemetryHourly, TelemetrySummary
from gpulease.domain.fleet.telemetry import GpuSummary, merge
from gpulease.platform import Platform
from gpulease.services.telemetry.retention import downsample
from gpulease.testing.clock import MovableClock

NOW = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)


def window(minute: int, temp: float, util: float, xids: tuple[int, ...] = ()) -> GpuSummary:
    return GpuSummary(
        index=3, uuid="GPU-3", name="H100", samples=60, start=minute * 60.0,
        end=minute * 60.0 + 60, temp_max_c=temp + 2, temp_avg_c=temp, power_avg_w=500.0,
        power_max_w=600 + minute, util_avg_pct=util, sm_clock_min_mhz=1980 - minute,
        sm_clock_max_mhz=1980.0, fb_used_max_mib=1000.0 * minute, thermal_throttle_s=1.5,
        power_throttle_s=0.0, xids=xids, ecc_sbe_delta=1, ecc_dbe_delta=0, ecc_dbe_total=0,
        remapped_rows_uncorrectable=0, row_remap_failure=False, pcie_replay_delta=2,
        nvlink_links=18, nvlink_down=(), energy_j=30000.0, temp_last_c=temp)


def test_merge_keeps_extremes_weighted_means_sums_and_every_xid() -> None:
    a, b = window(0, 60, 90), replace(window(1, 70, 50, xids=(79,)), samples=20)
    m = merge([b, a])
    assert (m.start, m.end, m.samples) == (0.0, 120.0, 80)
    assert m.temp_max_c == 72 and m.temp_avg_c == (60 * 60 + 70 * 20) / 80
    assert m.util_avg_pct == (90 * 60 + 50 * 20) / 80
    assert m.sm_clock_min_mhz == 1979 and m.power_max_w == 601
    assert m.thermal_throttle_s == 3.0 and m.ecc_sbe_delta == 2 and m.energy_j == 60000
    assert m.xids == (79,) and m.temp_last_c == 70


def test_old_minutes_fold_into_hours_and_old_hours_go(fleet: Platform) -> None:
    fleet.clock = MovableClock(NOW)
    with fleet.db.write() as s:
        node = s.scalars(select(Node.id).order_by(Node.name)).first()
        assert node is not None
        old = NOW - timedelta(days=8)
        hour = old.replace(minute=0, second=0, microsecond=0)
        rows = [(hour + timedelta(minutes=m), window(m, 60 + m / 10, 80)) for m in range(90)]
        rows.append((NOW - timedelta(days=2), window(0, 40, 10)))  # recent: kept as is
        s.add_all(TelemetrySummary(node_id=node, instance_id="i-1", received_at=at,
                                   gpu_index=w.index, gpu_uuid=w.uuid,
                                   summary_json=json.dumps(w.as_dict())) for at, w in rows)
        s.add(TelemetryHourly(node_id=node, instance_id="i-0", gpu_index=3, gpu_uuid="GPU-3",
                              hour=NOW - timedelta(days=91),
                              summary_json=json.dumps(window(0, 50, 50).as_dict())))
    # two batches: the first hour is split between them and merged into one row
    assert downsample(fleet, batch=45) == (45, 1)
    assert downsample(fleet, batch=45) == (45, 0)
    assert downsample(fleet, batch=45) == (0, 0)
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(TelemetrySummary)) == 1
        hours = list(s.scalars(select(TelemetryHourly).order_by(TelemetryHourly.hour)))
    assert [(h.hour, h.instance_id) for h in hours] == [
        (hour, "i-1"), (hour + timedelta(hours=1), "i-1")]
    first = GpuSummary.from_dict(json.loads(hours[0].summary_json))
    assert first.samples == 60 * 60 and first.start == 0 and first.end == 3600
    assert first.temp_max_c == 60 + 59 / 10 + 2 and first.temp_last_c == 60 + 59 / 10
    second = GpuSummary.from_dict(json.loads(hours[1].summary_json))
    assert second.samples == 30 * 60 and second.fb_used_max_mib == 89000
