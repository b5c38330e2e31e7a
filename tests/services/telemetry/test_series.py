"""An instance's GPU telemetry over time for its charts: a day of per-minute summaries from
8 GPUs folds into 5-minute buckets (the worst temperature, the mean power), the last hour
stays per minute, throttling and XID errors come as events on their bucket; only the
instance's own tenant sees it; a span it does not offer is a 422 naming `hours`; the
console serves the same data compressed. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from gpulease.api.app import create_app
from gpulease.db.tables import TelemetrySummary
from gpulease.demo_agents import DemoAgents
from gpulease.domain.errors import InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.services.telemetry import series as telemetry_series
from gpulease.testing.callers import new_tenant
from gpulease.testing.factories import deliver
from gpulease.worker.runner import Worker
from tests.web.console import signed_in


def _a_day_of_minutes(p: Platform, iid: str) -> None:
    """The agent's first push copied back over the last 24 hours, a minute apart; GPU 3
    throttles 40 minutes ago and GPU 5 reports XID 79 two hours ago."""
    with p.db.write() as s:
        latest = list(s.scalars(select(TelemetrySummary).where(
            TelemetrySummary.instance_id == iid)))
        now = p.clock.now()
        rows = []
        for minute in range(1, 24 * 60):
            for r in latest:
                summary = json.loads(r.summary_json)
                summary["temp_max_c"] = 50 + (minute % 5)  # the worst of five: 54
                summary["power_avg_w"] = 300.0 + (minute % 5) * 10  # their mean: 320
                if r.gpu_index == 3 and minute == 40:
                    summary["thermal_throttle_s"] = 12.0
                if r.gpu_index == 5 and minute == 120:
                    summary["xids"] = [79]
                rows.append({"node_id": r.node_id, "instance_id": iid,
                             "received_at": now - timedelta(minutes=minute),
                             "gpu_index": r.gpu_index, "gpu_uuid": r.gpu_uuid,
                             "summary_json": json.dumps(summary)})
        s.execute(insert(TelemetrySummary), rows)


def test_a_day_of_eight_gpus_folds_into_buckets_with_its_events(
        fleet: Platform, worker: Worker, key: str) -> None:
    t = new_tenant(fleet)
    iid = deliver(fleet, t, worker, key)
    assert DemoAgents(fleet).tick() == 1
    _a_day_of_minutes(fleet, iid)

    day = telemetry_series.instance_series(fleet, t.principal, iid, hours=24)
    assert day["step_s"] == 300 and len(day["nodes"]) == 1
    node = day["nodes"][0]
    assert [g["index"] for g in node["gpus"]] == list(range(8))
    gpu = node["gpus"][0]
    assert 288 <= len(gpu["t"]) <= 290  # a point per five minutes
    assert all(b - a == 300 for a, b in zip(gpu["t"], gpu["t"][1:], strict=False))
    full = [i for i in range(1, len(gpu["t"]) - 1)]  # whole buckets: five minutes each
    assert {gpu["temp_max_c"][i] for i in full} == {54.0}
    assert {gpu["power_avg_w"][i] for i in full} == {320.0}
    events = {(e["gpu"], e["kind"]) for e in node["events"]}
    assert events == {(3, "throttle"), (5, "xid")}
    assert next(e for e in node["events"] if e["kind"] == "xid")["xid"] == 79

    hour = telemetry_series.instance_series(fleet, t.principal, iid, hours=1)
    assert hour["step_s"] == 60 and 59 <= len(hour["nodes"][0]["gpus"][0]["t"]) <= 61
    assert {(e["gpu"], e["kind"]) for e in hour["nodes"][0]["events"]} == {(3, "throttle")}

    with pytest.raises(InvalidInput) as bad:
        telemetry_series.instance_series(fleet, t.principal, iid, hours=2)
    assert bad.value.field == "hours"
    stranger = new_tenant(fleet)
    with pytest.raises(NotFound):
        telemetry_series.instance_series(fleet, stranger.principal, iid, hours=24)

    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        served = client.get(f"/console/instances/{iid}/telemetry.json", params={"hours": 24},
                            headers={"Accept-Encoding": "gzip"})
        assert served.status_code == 200 and served.headers["content-encoding"] == "gzip"
        assert served.json()["nodes"][0]["events"] == node["events"]
        assert int(served.headers["content-length"]) < 60_000  # a day of 8 GPUs, gzipped
        page = client.get(f"/console/instances/{iid}")
        assert 'id="charts"' in page.text and "echarts.common.min.js" in page.text
        api = client.get(f"/api/v1/instances/{iid}/telemetry", params={"hours": 1},
                         headers={"Authorization": f"Bearer {t.token}"})
        assert api.status_code == 200 and api.json()["step_s"] == 60
        bad_span = client.get(f"/api/v1/instances/{iid}/telemetry", params={"hours": 5},
                              headers={"Authorization": f"Bearer {t.token}"})
        assert bad_span.status_code == 422 and bad_span.json()["field"] == "hours"
