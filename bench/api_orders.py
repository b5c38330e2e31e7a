"""Orders over HTTP: 8 concurrent clients POST /api/v1/instances (one H100 server each)
against uvicorn on 127.0.0.1, on a 10,000-node simulated fleet; beside it, in the same run,
the same orders placed by calling the service directly (no HTTP, no token check, no rate
limit, no audit row). The ratio is what the API layer costs a placement. The clients run in
a process of their own, as they would in the field (in the server's process they would
share its interpreter lock). Prints JSON.

Runs against whichever gpulease is first on sys.path (this checkout, or an older one given
as GPULEASE_BENCH_CODE, for before-and-after figures from the same script)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("GPULEASE_BENCH_CODE", str(HERE.parent)))
sys.path.insert(1, str(HERE.parent))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from bench._common import bench_platform, free_port, fund, ssh_key  # noqa: E402
from bench.placement_throughput import build_fleet, parallel  # noqa: E402
from gpulease.api.app import create_app  # noqa: E402
from gpulease.schemas import OrderRequest  # noqa: E402
from gpulease.services.accounts import identity as accounts  # noqa: E402
from gpulease.services.orders import ordering as orders  # noqa: E402

CLIENTS = 8
ORDERS_PER_CLIENT = 60
BODY = {"sku": "h100-80g-x8", "region": "ningxia-1", "term": "day"}


def run(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        build_fleet(p)
        created = accounts.create_tenant(p, "bench", accounts.Person("bench@example.com", "Bench"))
        fund(p, created.tenant.id)
        token = created.token.token
        assert token is not None
        who = accounts.authenticate(p, token)
        key = ssh_key()
        body = {**BODY, "ssh_keys": [key]}

        def place_direct() -> None:
            orders.place_order(p, who, OrderRequest(**body))

        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(p), host="127.0.0.1", port=port,
                                               log_level="warning", access_log=False))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        try:
            for _ in range(10):  # warm both paths
                place_direct()
            work = [ORDERS_PER_CLIENT] * CLIENTS
            direct_s = parallel(CLIENTS, work, place_direct)
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                http_s = pool.apply(clients, (port, token, body))
        finally:
            server.should_exit = True
            thread.join(10)
        total = CLIENTS * ORDERS_PER_CLIENT
        direct, http = total / direct_s, total / http_s
        return {"db": db, "orders": total, "direct_orders_per_s": round(direct, 1),
                "http_orders_per_s": round(http, 1),
                "http_over_direct": round(http / direct, 3)}


def clients(port: int, token: str, body: dict[str, Any]) -> float:
    """In the clients' process: warm up, then CLIENTS threads order; the seconds taken."""
    local = threading.local()

    def place_http() -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=30,
                headers={"Authorization": f"Bearer {token}"})
        client.post("/api/v1/instances", json=body).raise_for_status()

    for _ in range(10):
        place_http()
    return parallel(CLIENTS, [ORDERS_PER_CLIENT] * CLIENTS, place_http)


if __name__ == "__main__":
    dbs = sys.argv[1:] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "api_orders", "clients": CLIENTS,
                      "code": os.environ.get("GPULEASE_BENCH_CODE", "this checkout"),
                      "results": [run(db) for db in dbs]}, indent=2))
