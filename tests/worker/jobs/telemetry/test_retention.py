"""The telemetry job: per-minute summaries past GPULEASE_TELEMETRY_MINUTE_DAYS fold into one
row per GPU and hour; newer ones stay as they are."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from gpulease.db.tables import Node, TelemetryHourly, TelemetrySummary
from gpulease.platform import Platform
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import window
from gpulease.worker.jobs.telemetry import retention

NOW = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)


def test_old_minutes_fold_into_hours(fleet: Platform) -> None:
    fleet.clock = MovableClock(NOW)
    summary = window()[0]
    with fleet.db.write() as s:
        node = s.scalars(select(Node.id).order_by(Node.name)).first()
        assert node is not None
        hour = (NOW - timedelta(days=8)).replace(minute=0, second=0, microsecond=0)
        s.add_all(TelemetrySummary(node_id=node, instance_id="i-1",
                                   received_at=hour + timedelta(minutes=m),
                                   gpu_index=0, gpu_uuid=str(summary["uuid"]),
                                   summary_json=json.dumps(summary)) for m in range(30))
        s.add(TelemetrySummary(node_id=node, instance_id="i-1", received_at=NOW,
                               gpu_index=0, gpu_uuid=str(summary["uuid"]),
                               summary_json=json.dumps(summary)))
    assert retention.JOB.run(fleet, "test") == (30, 0)
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(TelemetrySummary)) == 1  # today's
        assert s.scalar(select(func.count()).select_from(TelemetryHourly)) == 1
