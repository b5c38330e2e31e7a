"""GET /api/v1/catalog, GET /api/v1/instances/{id} and POST /api/v1/quotes latency over
real HTTP (uvicorn on 127.0.0.1, keep-alive client), beside a bare endpoint added to the
same app: the difference is what gpulease itself costs per request. Prints JSON."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn

from bench._common import bench_platform, free_port, fund, ssh_key, summary_ms
from gpulease.api.app import create_app
from gpulease.demo import seed_demo_fleet
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.orders import ordering as orders
from gpulease.worker.runner import Worker

ROUNDS = 400


def run(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        seed_demo_fleet(p, 2)
        created = accounts.create_tenant(p, "bench", accounts.Person("bench@example.com", "Bench"))
        fund(p, created.tenant.id)  # orders hold their first period
        who = accounts.authenticate(p, created.token.token)
        iid = orders.place_order(p, who, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()]))[0].id
        Worker(p).run_until_idle()
        app = create_app(p)

        @app.get("/bench/bare")
        def bare() -> dict[str, str]:
            return {"ok": "yes"}

        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", access_log=False))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        headers = {"Authorization": f"Bearer {created.token.token}"}
        results: dict[str, object] = {"db": db}
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as client:
                for name, path in (("bare", "/bench/bare"), ("catalog", "/api/v1/catalog"),
                                   ("instance", f"/api/v1/instances/{iid}")):
                    for _ in range(20):
                        client.get(path).raise_for_status()
                    samples = []
                    for _ in range(ROUNDS):
                        t = time.perf_counter()
                        client.get(path).raise_for_status()
                        samples.append(time.perf_counter() - t)
                    results[name] = summary_ms(samples)
                # a quote with the full fee list (POST, no database write)
                body = {"sku": "h100-80g-x8", "region": "ningxia-1", "term": "month",
                        "count": 3, "add": {"public-bandwidth": "100", "egress": "500"},
                        "days_per_week": "1"}
                for _ in range(20):
                    client.post("/api/v1/quotes", json=body).raise_for_status()
                samples = []
                for _ in range(ROUNDS):
                    t = time.perf_counter()
                    client.post("/api/v1/quotes", json=body).raise_for_status()
                    samples.append(time.perf_counter() - t)
                results["quote"] = summary_ms(samples)
        finally:
            server.should_exit = True
            thread.join(5)
        bare_p50 = results["bare"]["p50_ms"]  # type: ignore[index]
        for name in ("catalog", "instance", "quote"):
            results[f"{name}_over_bare_p50"] = round(
                results[name]["p50_ms"] / bare_p50, 1)  # type: ignore[index]
        results["aim_catalog_p50_ms"] = 5
        return results


if __name__ == "__main__":
    dbs = sys.argv[1:] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "api_latency", "rounds": ROUNDS,
                      "results": [run(db) for db in dbs]}, indent=2))
