"""Order-to-ready overhead of the control plane with zero-delay simulated hardware.

Orders are placed one at a time and the built-in worker (threads, as in `gpulease up`)
delivers each; the figure is the platform's own record (ready_at - ordered_at), so it is
pure control-plane time: claims, pipeline steps, transactions, wake-ups. Beside it, in the
same run, the database's cost of one small write transaction. Prints JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_platform, fund, raw_write_txn_s, ssh_key, summary_ms
from gpulease.db.tables import Instance
from gpulease.demo import seed_demo_fleet
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.worker.runner import Worker

ORDERS = 40


def run(db: str) -> dict[str, object]:
    with bench_platform(db, poll_interval_s=0.05) as p:
        seed_demo_fleet(p, 1)
        created = accounts.create_tenant(p, "bench", accounts.Person("bench@example.com", "Bench"))
        fund(p, created.tenant.id)  # orders hold their first period
        who = accounts.authenticate(p, created.token.token)
        worker = Worker(p)
        worker.start(threads=4)
        key = ssh_key()
        delivery = []
        try:
            for _ in range(ORDERS):
                req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key])
                iid = orders.place_order(p, who, req)[0].id
                deadline = time.monotonic() + 30
                while True:
                    with p.db.read() as s:
                        inst = s.get(Instance, iid)
                        assert inst is not None
                        if inst.ready_at is not None:
                            delivery.append((inst.ready_at - inst.ordered_at).total_seconds())
                            break
                        if inst.status == "failed" or time.monotonic() > deadline:
                            raise RuntimeError(f"{iid}: {inst.status} {inst.status_reason}")
                    time.sleep(0.002)
                actions.release_instance(p, who, iid)
                while instances.show_instance(p, who, iid).status != "released":
                    time.sleep(0.005)
        finally:
            worker.stop()
        txn = raw_write_txn_s(p)
        over, base = summary_ms(delivery), summary_ms(txn)
        return {"db": db, "order_to_ready": over, "db_write_txn": base,
                "overhead_p50_in_write_txns": round(over["p50_ms"] / base["p50_ms"], 1),
                "aim_p50_ms": 1000, "meets_aim": over["p50_ms"] <= 1000}


if __name__ == "__main__":
    dbs = sys.argv[1:] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "order_overhead", "orders_per_db": ORDERS,
                      "results": [run(db) for db in dbs]}, indent=2))
