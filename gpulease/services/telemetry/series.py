"""An instance's GPU telemetry over time, for charts: the per-minute summaries its node
agents pushed (kept GPULEASE_TELEMETRY_MINUTE_DAYS, 7 by default) folded into buckets
(one minute over the last hour, five over a day, fifteen over a week) per node and GPU,
with the events worth marking on a curve: thermal or power throttling and XID errors.

Compact by design (a day of 8 GPUs is a few tens of kilobytes): time as Unix seconds,
one array per metric, values rounded to what a chart shows. A bucket that has ended does
not change (a summary is stamped when it arrives), so each process keeps the ended ones it
folded and reads only the newer summaries when the page asks again a minute later."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from gpulease.db.repositories import get_instance
from gpulease.db.tables import Node, TelemetrySummary
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.ports.records import Records

# Over how many hours, in buckets of how many seconds.
WINDOWS = {1: 60, 24: 300, 168: 900}
# metric: how a bucket folds its minutes (the worst one for maxima, the mean otherwise)
METRICS = {"temp_max_c": max, "sm_clock_max_mhz": max, "sm_clock_min_mhz": min,
           "power_avg_w": None, "util_avg_pct": None, "fb_used_max_mib": max}


# A summary arriving is stamped with the time it arrived: a bucket ended this long ago
# can gain no more (a slow transaction commits well within it).
SETTLED_S = 120
CACHED_SERIES = 512  # (instance, span) pairs kept per process


@dataclass
class _Bucket:
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    throttle_s: float = 0.0
    xids: set[int] = field(default_factory=set)


Buckets = dict[tuple[str, int], dict[int, _Bucket]]


@dataclass
class _Folded:
    """The ended buckets of one instance at one step, and where they end."""

    until: int
    buckets: Buckets


_folded: OrderedDict[tuple[str, int], _Folded] = OrderedDict()
_folded_lock = threading.Lock()


def _fold(metric: str, values: list[float]) -> float | None:
    if not values:
        return None
    how = METRICS[metric]
    value = how(values) if how is not None else sum(values) / len(values)
    return round(value, 1)


def _fold_rows(buckets: Buckets, rows: Any, step: int) -> None:
    for node_id, gpu, at, raw in rows:
        summary = json.loads(raw)
        t = int(at.timestamp()) // step * step
        bucket = buckets[(node_id, gpu)].setdefault(t, _Bucket())
        for metric in METRICS:
            if (value := summary.get(metric)) is not None:
                bucket.values[metric].append(float(value))
        bucket.throttle_s += float(summary.get("thermal_throttle_s") or 0) + float(
            summary.get("power_throttle_s") or 0)
        bucket.xids.update(summary.get("xids") or ())


def instance_series(p: Records, actor: Principal, instance_id: str, hours: int = 24
                    ) -> dict[str, Any]:
    if hours not in WINDOWS:
        raise InvalidInput("hours", "Charts cover 1, 24 or 168 hours, not {hours}.",
                           [str(h) for h in WINDOWS], hours=hours)
    step = WINDOWS[hours]
    now = p.clock.now()
    since = now - timedelta(hours=hours)
    first = int(since.timestamp()) // step * step
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        with _folded_lock:
            kept = _folded.get((inst.id, step))
        read_from = max(since, datetime.fromtimestamp(kept.until, UTC)) if kept else since
        rows = s.execute(
            select(TelemetrySummary.node_id, TelemetrySummary.gpu_index,
                   TelemetrySummary.received_at, TelemetrySummary.summary_json)
            .where(TelemetrySummary.instance_id == inst.id,
                   TelemetrySummary.received_at >= read_from)
            .order_by(TelemetrySummary.received_at)).all()
        buckets: Buckets = defaultdict(dict)
        if kept is not None:
            for key, by_time in kept.buckets.items():
                buckets[key] = {t: b for t, b in by_time.items() if t >= first}
        _fold_rows(buckets, rows, step)
        ids = {node_id for node_id, _ in buckets}
        names = {node_id: name for node_id, name in s.execute(
            select(Node.id, Node.name).where(Node.id.in_(ids)))} if ids else {}
    settled = (int(now.timestamp()) - SETTLED_S) // step * step
    with _folded_lock:
        _folded[(inst.id, step)] = _Folded(settled, {
            key: {t: b for t, b in by_time.items() if t < settled}
            for key, by_time in buckets.items()})
        _folded.move_to_end((inst.id, step))
        while len(_folded) > CACHED_SERIES:
            _folded.popitem(last=False)
    nodes: dict[str, dict[str, Any]] = {}
    for (node_id, gpu), by_time in sorted(buckets.items()):
        node = nodes.setdefault(node_id, {"node": names.get(node_id, node_id), "gpus": [],
                                          "events": []})
        times = sorted(by_time)
        node["gpus"].append({"index": gpu, "t": times, **{
            metric: [_fold(metric, by_time[t].values[metric]) for t in times]
            for metric in METRICS}})
        for t in times:
            b = by_time[t]
            if b.throttle_s > 0:
                node["events"].append({"t": t, "gpu": gpu, "kind": "throttle",
                                       "seconds": round(b.throttle_s, 1)})
            for xid in sorted(b.xids):
                node["events"].append({"t": t, "gpu": gpu, "kind": "xid", "xid": xid})
    return {"instance_id": inst.id, "hours": hours, "step_s": step,
            "since": int(since.timestamp()), "until": int(now.timestamp()),
            "metrics": list(METRICS), "nodes": list(nodes.values())}
