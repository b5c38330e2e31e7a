"""Hardware alerts from the agent's telemetry: each push's window opens an alert per GPU and
kind it raises (one open at a time, a ticket with it), refreshes one still raised and
closes one no longer raised (past the outage SLA, a claim for the operator). The BMC's
alerts (services/fleet/bmc_health.py) close by its health instead."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.tables import HardwareAlert, Node, TelemetrySummary
from gpulease.domain.fleet.telemetry import (
    Alert,
    AlertKind,
    AlertRules,
    GpuSummary,
    alerts_for,
    merge,
)
from gpulease.domain.phrases import stored
from gpulease.lifecycle.history import agent as agent_actor
from gpulease.ports.records import Priced
from gpulease.services.money import sla
from gpulease.services.support import tickets


def _phrase_json(alert: Alert) -> str | None:
    return stored(alert.phrase)[1] if alert.phrase is not None else None


RULES = AlertRules()


def _joined(s: Session, node: Node, gpus: set[int], now: datetime, rules: AlertRules
            ) -> dict[int, GpuSummary]:
    """Each of `gpus`' windows received over the last `rules.thermal_span_s` (the push
    being stored among them), merged into one: a window of 10 s, or a 60 s one that a
    throttled half-minute straddles, is judged with its neighbours. Read only for GPUs
    throttled now or with a thermal alert open."""
    if not gpus:
        return {}
    s.flush()  # this push's rows
    q = select(TelemetrySummary.gpu_index, TelemetrySummary.summary_json).where(
        TelemetrySummary.node_id == node.id,
        TelemetrySummary.instance_id == node.instance_id,  # its tenant's windows only
        TelemetrySummary.received_at >= now - timedelta(seconds=rules.thermal_span_s),
        TelemetrySummary.gpu_index.in_(sorted(gpus)))
    windows: dict[int, list[GpuSummary]] = {}
    for index, data in s.execute(q):
        windows.setdefault(index, []).append(GpuSummary.from_dict(json.loads(data)))
    return {index: merge(parts) for index, parts in windows.items()}


def sync_agent_alerts(s: Session, p: Priced, node: Node, summaries: Sequence[GpuSummary],
                 now: datetime) -> list[dict[str, Any]]:
    """Open an alert the window shows, refresh one still shown, close one no longer shown.
    Thermal throttling is judged over the GPU's recent windows joined (`_joined`)."""
    reported = {g.index for g in summaries}
    open_rows = s.scalars(select(HardwareAlert).where(
        HardwareAlert.node_id == node.id, HardwareAlert.closed_at.is_(None),
        HardwareAlert.source == "agent")).all()  # the BMC's alerts close by its health
    hot = {g.index for g in summaries if g.thermal_throttle_s > 0} | {
        row.gpu_index for row in open_rows
        if row.kind == AlertKind.THERMAL_THROTTLING.value and row.gpu_index in reported}
    joined = _joined(s, node, hot, now, RULES)
    raised = {(a.gpu, a.kind.value): a for a in alerts_for(summaries, RULES, joined)}
    seen = set()
    for row in open_rows:
        key = (row.gpu_index, row.kind)
        if key in raised:
            row.last_seen_at, row.message = now, raised[key].message
            row.phrase = _phrase_json(raised[key])
            seen.add(key)
        elif row.gpu_index in reported:
            row.closed_at = now
            sla.claim_outage(s, row)  # beyond the outage SLA: a claim for the operator
            tickets.alert_cleared(s, row, now, agent_actor(node.id))
    for key, alert in raised.items():
        if key not in seen:
            opened = HardwareAlert(node_id=node.id, instance_id=node.instance_id,
                                   gpu_index=alert.gpu, gpu_uuid=alert.uuid,
                                   kind=alert.kind.value, severity=alert.severity,
                                   message=alert.message, phrase=_phrase_json(alert),
                                   opened_at=now, last_seen_at=now)
            s.add(opened)
            s.flush()  # the ticket's evidence names it
            tickets.open_from_alert(s, p, opened, now, agent_actor(node.id))
    return [a.as_dict() for a in raised.values()]
