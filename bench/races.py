"""Races on PostgreSQL: eight clients of two tenants order, renew, top up and release at once
for a while, while a worker with four threads delivers and cleans (the demo's simulated
servers, no delay), and the tenants' agents push telemetry. Afterwards: PostgreSQL's own
deadlock count for the database over the run (pg_stat_database, read before and after),
GPUs held twice, what the clients were refused and why, and the rows each step made.
Run it alone on the database: the deadlock count is the database's, whoever caused it.
Prints JSON. `python bench/races.py [seconds]`."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from bench._common import bench_platform, fund, ssh_key
from gpulease.demo import seed_demo_fleet
from gpulease.demo_agents import DemoAgents
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import DomainError
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.instances import actions
from gpulease.services.money import leases, wallet
from gpulease.services.orders import ordering as orders
from gpulease.testing.factories import double_allocated_gpus
from gpulease.worker.runner import Worker

CLIENTS = 8
OFFERS = (("h100-80g-x8", "ningxia-1"), ("a100-80g-x8", "sichuan-1"),
          ("rtx4090-24g-x8", "sichuan-2"))


def deadlocks(p: Platform) -> int:
    with p.db.read() as s:
        return int(s.scalar(text("SELECT deadlocks FROM pg_stat_database "
                                 "WHERE datname = current_database()")) or 0)


def client(p: Platform, who: Principal, seconds: float, seed: int, outcomes: Counter[str],
           lock: threading.Lock) -> None:
    rng = random.Random(seed)
    key = ssh_key()
    mine: list[str] = []
    operator = Principal(user_id="bench", tenant_id=None, role=Role.OPERATOR)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded
        roll = rng.random()
        try:
            if roll < 0.4 or not mine:
                sku, region = rng.choice(OFFERS)
                mine.append(orders.place_order(p, who, OrderRequest(
                    sku=sku, region=region, ssh_keys=[key]))[0].id)
                what = "order"
            elif roll < 0.6:
                leases.renew(p, who, rng.choice(mine), periods=1)
                what = "renew"
            elif roll < 0.7:
                assert who.tenant_id is not None
                wallet.top_up(p, operator, who.tenant_id, Decimal("1000"),
                              f"bench-{seed}-{time.monotonic_ns()}")
                what = "top_up"
            else:
                actions.release_instance(p, who, mine.pop(rng.randrange(len(mine))))
                what = "release"
            outcome = f"{what}: done"
        except DomainError as exc:
            outcome = f"{type(exc).__name__}"
        except Exception as exc:  # noqa: BLE001 - what the bench is for: counted, not hidden
            outcome = f"error {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        with lock:
            outcomes[outcome] += 1
        time.sleep(rng.uniform(0.0, 0.05))


def run(seconds: float) -> dict[str, object]:
    with bench_platform("postgresql", poll_interval_s=0.02) as p:
        seed_demo_fleet(p, 6)
        tenants = []
        for n in range(2):
            made = accounts.create_tenant(p, f"race-{n}", accounts.Person(
                f"race{n}@example.com", f"Race {n}"))
            fund(p, made.tenant.id)
            tenants.append(accounts.authenticate(p, made.token.token))
        before = deadlocks(p)
        worker = Worker(p)
        worker.start(threads=4)
        agents = DemoAgents(p)
        outcomes: Counter[str] = Counter()
        lock = threading.Lock()
        stop = threading.Event()

        def pushes() -> None:
            while not stop.wait(0.5):  # the rented servers' agents, as the demo runs them
                try:
                    agents.tick()
                except Exception:  # noqa: BLE001 - a push refused mid-release is expected
                    outcomes["push refused"] += 1

        pusher = threading.Thread(target=pushes, daemon=True)
        pusher.start()
        crowd = [threading.Thread(target=client, args=(p, tenants[i % 2], seconds, i,
                                                      outcomes, lock))
                 for i in range(CLIENTS)]
        for t in crowd:
            t.start()
        for t in crowd:
            t.join()
        stop.set()
        pusher.join(10)
        worker.run_until_idle(timeout_s=120)
        worker.stop()
        after = deadlocks(p)
        doubled = double_allocated_gpus(p)
    return {"bench": "races", "db": "postgresql", "seconds": seconds, "clients": CLIENTS,
            "worker_threads": 4, "deadlocks": after - before, "gpus_held_twice": len(doubled),
            "outcomes": dict(sorted(outcomes.items()))}


if __name__ == "__main__":
    print(json.dumps(run(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0), indent=2))
