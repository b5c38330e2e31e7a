"""The console's pages: server time per page (in process, SQLite, a tenant with one
delivered 8-GPU server and a day of its per-minute telemetry), beside the API's /me in
the same run as the baseline; and what the instance page with its 24-hour charts costs a
first visit on the wire (gzip): the page, its stylesheet and scripts, the chart library
and a day of 8 GPUs' data. Prints JSON.

Usage: python bench/console_pages.py [N]
"""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from bench._common import bench_platform, fund, ssh_key, summary_ms
from gpulease.api.app import create_app
from gpulease.db.tables import TelemetrySummary
from gpulease.demo import seed_demo_fleet
from gpulease.demo_agents import DemoAgents
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.orders import ordering as orders
from gpulease.worker.runner import Worker

PASSWORD = "correct horse battery staple"


def a_day_of_telemetry(p: Platform, iid: str) -> int:
    """The agent's push copied back a minute apart over the last day, each metric varied
    as a working GPU's would be (noise compresses as real data does, unlike copies)."""
    rng = random.Random(7)
    with p.db.write() as s:
        latest = list(s.scalars(select(TelemetrySummary).where(
            TelemetrySummary.instance_id == iid)))
        now = p.clock.now()
        rows = []
        for m in range(1, 24 * 60):
            for r in latest:
                summary = json.loads(r.summary_json) | {
                    "temp_max_c": round(rng.uniform(55, 82), 1),
                    "sm_clock_max_mhz": float(rng.choice(range(1590, 1981, 15))),
                    "sm_clock_min_mhz": float(rng.choice(range(1410, 1591, 15))),
                    "power_avg_w": round(rng.uniform(380, 690), 1),
                    "util_avg_pct": round(rng.uniform(60, 100), 1),
                    "fb_used_max_mib": float(rng.randrange(40_000, 80_000))}
                rows.append({"node_id": r.node_id, "instance_id": iid,
                             "received_at": now - timedelta(minutes=m),
                             "gpu_index": r.gpu_index, "gpu_uuid": r.gpu_uuid,
                             "summary_json": json.dumps(summary)})
        s.execute(insert(TelemetrySummary), rows)
    return len(rows) + len(latest)


def timed(client: TestClient, url: str, n: int, **kw: object) -> dict[str, float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        answer = client.get(url, **kw)  # type: ignore[arg-type]
        samples.append(time.perf_counter() - t)
        assert answer.status_code == 200, (url, answer.status_code)
    return summary_ms(samples)


def wire_bytes(client: TestClient, url: str) -> int:
    """What the answer weighs on the wire with gzip accepted (the raw, undecoded body)."""
    with client.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as answer:
        assert answer.status_code == 200, url
        return sum(len(chunk) for chunk in answer.iter_raw())


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    out: dict[str, Any] = {"bench": "console_pages", "n": n}
    with bench_platform("sqlite") as p:
        seed_demo_fleet(p, 2)
        created = accounts.create_tenant(p, "bench-console", accounts.Person("bench@example.com",
                                                                             "Bench"))
        fund(p, created.tenant.id)
        who = accounts.authenticate(p, created.token.token)
        users.change_password(p, who, PASSWORD, None)
        iid = orders.place_order(p, who, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()]))[0].id
        Worker(p, owner="bench").run_until_idle()
        DemoAgents(p).tick()
        out["telemetry_rows"] = a_day_of_telemetry(p, iid)
        with TestClient(create_app(p)) as client:
            client.post("/console/login", data={"email": "bench@example.com",
                                                "password": PASSWORD})
            pages = {"home": "/console/", "catalog": "/console/catalog",
                     "order": "/console/order?sku=h100-80g-x8&region=ningxia-1",
                     "instance": f"/console/instances/{iid}", "billing": "/console/billing",
                     "release": f"/console/instances/{iid}/release",
                     "telemetry_24h_json": f"/console/instances/{iid}/telemetry.json?hours=24"}
            t = time.perf_counter()
            client.get(pages["telemetry_24h_json"])
            out["telemetry_24h_json_first_read_ms"] = round((time.perf_counter() - t) * 1000, 1)
            for url in pages.values():  # warm: templates compiled, ended buckets folded
                client.get(url)
            out["baseline_api_me"] = timed(client, "/api/v1/me", n, headers={
                "Authorization": f"Bearer {created.token.token}"})
            out["pages_ms"] = {name: timed(client, url, n) for name, url in pages.items()}
            out["pages_zh_CN_ms"] = {name: timed(client, url, n, headers={
                "Accept-Language": "zh-CN"}) for name, url in pages.items()
                if name in ("home", "instance")}
            first_visit = {
                "page": wire_bytes(client, pages["instance"]),
                "console.css": wire_bytes(client, "/console/static/console.css"),
                "telemetry.js": wire_bytes(client, "/console/static/telemetry.js"),
                "echarts.common.min.js": wire_bytes(
                    client, "/console/vendor/echarts.common.min.js"),
                "data_24h": wire_bytes(client, pages["telemetry_24h_json"]),
            }
            out["instance_page_24h_first_visit_bytes"] = first_visit | {
                "total": sum(first_visit.values()),
                "data_24h_uncompressed": len(client.get(pages["telemetry_24h_json"]).content)}
            html = {k: v for k, v in out["pages_ms"].items() if not k.endswith("_json")}
            worst = max(html.items(), key=lambda kv: kv[1]["p50_ms"])
            out["targets"] = {"page_p50_ms_max": 50,
                              "worst_page_p50_ms": {worst[0]: worst[1]["p50_ms"]},
                              "instance_page_24h_bytes_max": 300_000}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
