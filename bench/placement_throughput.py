"""Placement throughput: 8 concurrent clients ordering bare metal from a 10,000-node
simulated fleet, beside the database's raw rate of small write transactions with 8
threads, measured in the same run through the same engine. Prints JSON."""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event, insert, text

from bench._common import bench_platform, fund, ssh_key
from gpulease.db.tables import Fabric, Gpu, Node
from gpulease.domain.errors import OutOfStock
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.orders import ordering as orders

FLEET = 10_000  # 1,320 orders in all leave most of it free
CLIENTS = 8
ORDERS_PER_CLIENT = 150


def build_fleet(p: Platform) -> None:
    now = datetime.now(UTC)
    sealed = p.box.seal("bench")
    with p.db.write() as s:
        s.execute(insert(Fabric), [
            {"id": f"ib-{i}", "region": "ningxia-1", "kind": "infiniband", "rate_gbps": 400}
            for i in range(FLEET // 32 + 1)])
        nodes, gpus = [], []
        for i in range(FLEET):
            nid = f"node-{i:05d}"
            nodes.append({
                "id": nid, "name": f"bench-{i:05d}", "sku": "h100-80g-x8", "region": "ningxia-1",
                "pool": "bare_metal", "serial": f"B{i}", "fabric_id": f"ib-{i // 32}",
                "bmc_driver": "simulated", "bmc_address": f"simulated://bench-{i}",
                "bmc_username": "admin", "bmc_password_enc": sealed, "status": "available",
                "generation": 0, "attempts": 0, "created_at": now, "updated_at": now})
            gpus += [{"id": f"gpu-{i:05d}-{g}", "node_id": nid, "index": g,
                      "model": "NVIDIA H100 SXM 80GB", "uuid": str(uuid.uuid4())}
                     for g in range(8)]
        for chunk in range(0, len(nodes), 2000):
            s.execute(insert(Node), nodes[chunk:chunk + 2000])
        for chunk in range(0, len(gpus), 8000):
            s.execute(insert(Gpu), gpus[chunk:chunk + 8000])


def parallel(threads: int, work: list[int], fn) -> float:  # type: ignore[no-untyped-def]
    start = threading.Barrier(threads + 1)

    def run(count: int) -> None:
        start.wait()
        for _ in range(count):
            fn()

    pool = [threading.Thread(target=run, args=(n,)) for n in work]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def statements_per_order(p: Platform, place: Callable[[], None], n: int = 20) -> float:
    """SQL statements sent per order (BEGIN and COMMIT not counted), over n more orders."""
    sent = [0]

    def count(*_: object) -> None:
        sent[0] += 1

    event.listen(p.db.engine, "before_cursor_execute", count)
    try:
        for _ in range(n):
            place()
    finally:
        event.remove(p.db.engine, "before_cursor_execute", count)
    return sent[0] / n


def one_order_ms(place: Callable[[], None], n: int = 100) -> float:
    """Median time of one order placed with no other order running (no contention)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        place()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 3)


def run(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        build_fleet(p)
        created = accounts.create_tenant(p, "bench", accounts.Person("bench@example.com", "Bench"))
        fund(p, created.tenant.id)  # orders hold their first period
        who = accounts.authenticate(p, created.token.token)
        req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()])
        refused = []

        def place() -> None:
            try:
                orders.place_order(p, who, req)
            except OutOfStock:
                refused.append(1)

        total = CLIENTS * ORDERS_PER_CLIENT
        elapsed = parallel(CLIENTS, [ORDERS_PER_CLIENT] * CLIENTS, place)
        statements = statements_per_order(p, place)
        alone_ms = one_order_ms(place)

        with p.db.write() as s:
            s.execute(text("CREATE TABLE bench_rows (id INTEGER PRIMARY KEY, n INTEGER)"))
            for i in range(CLIENTS):
                s.execute(text("INSERT INTO bench_rows (id, n) VALUES (:i, 0)"), {"i": i})
        ids = iter(range(10**9))
        lock = threading.Lock()

        def raw() -> None:
            with lock:
                row = next(ids) % CLIENTS
            with p.db.write() as s:
                s.execute(text("UPDATE bench_rows SET n = n + 1 WHERE id = :i"), {"i": row})

        raw_total = CLIENTS * 400
        raw_elapsed = parallel(CLIENTS, [400] * CLIENTS, raw)
        orders_per_s = (total - len(refused)) / elapsed
        raw_per_s = raw_total / raw_elapsed
        return {"db": db, "fleet_nodes": FLEET, "clients": CLIENTS, "orders": total,
                "refused": len(refused), "orders_per_s": round(orders_per_s, 1),
                "raw_write_txn_per_s": round(raw_per_s, 1),
                "orders_per_raw_txn": round(orders_per_s / raw_per_s, 3),
                "statements_per_order": statements,
                "one_order_alone_p50_ms": alone_ms,
                "aim_orders_per_s_postgresql": 300}


if __name__ == "__main__":
    dbs = sys.argv[1:] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "placement_throughput", "results": [run(db) for db in dbs]},
                     indent=2))
