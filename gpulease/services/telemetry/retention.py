"""Telemetry retention with downsampling: per-minute GPU summaries older than
GPULEASE_TELEMETRY_MINUTE_DAYS are merged into one summary per GPU and hour (the same
node, instance and GPU), and hourly ones older than GPULEASE_TELEMETRY_HOUR_DAYS are
deleted. A batch at a time, oldest first, so a sweep stays short; an hour split between
two batches is merged into the row the first one wrote."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from gpulease.db.tables import TelemetryHourly, TelemetrySummary
from gpulease.domain.fleet.telemetry import GpuSummary, merge
from gpulease.ports.records import Records

BATCH = 5000
Key = tuple[str, str | None, int, datetime]


def _hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def downsample(p: Records, batch: int = BATCH) -> tuple[int, int]:
    """(per-minute summaries folded into hours, hourly summaries deleted)."""
    now = p.clock.now()
    minute_cutoff = now - timedelta(days=p.settings.telemetry_minute_days)
    hour_cutoff = now - timedelta(days=p.settings.telemetry_hour_days)
    with p.db.write() as s:
        old = list(s.scalars(select(TelemetrySummary)
                             .where(TelemetrySummary.received_at < minute_cutoff)
                             .order_by(TelemetrySummary.id).limit(batch)
                             .with_for_update(skip_locked=True)))
        groups: dict[Key, list[TelemetrySummary]] = {}
        for row in old:
            key = (row.node_id, row.instance_id, row.gpu_index, _hour(row.received_at))
            groups.setdefault(key, []).append(row)
        if groups:
            hours = {key[3] for key in groups}
            existing: dict[Key, TelemetryHourly] = {
                (h.node_id, h.instance_id, h.gpu_index, h.hour): h
                for h in s.scalars(select(TelemetryHourly).where(
                    TelemetryHourly.hour.in_(hours),
                    TelemetryHourly.node_id.in_({key[0] for key in groups})))}
            for key, rows in groups.items():
                parts = [GpuSummary.from_dict(json.loads(r.summary_json)) for r in rows]
                hourly = existing.get(key)
                if hourly is not None:
                    parts.append(GpuSummary.from_dict(json.loads(hourly.summary_json)))
                merged = json.dumps(merge(parts).as_dict())
                if hourly is None:
                    s.add(TelemetryHourly(node_id=key[0], instance_id=key[1], gpu_index=key[2],
                                          hour=key[3], gpu_uuid=rows[-1].gpu_uuid,
                                          summary_json=merged))
                else:
                    hourly.summary_json = merged
            s.execute(delete(TelemetrySummary).where(
                TelemetrySummary.id.in_([r.id for r in old])))
        gone = s.execute(delete(TelemetryHourly).where(TelemetryHourly.hour < hour_cutoff))
        return len(old), int(gone.rowcount or 0)  # type: ignore[attr-defined]
