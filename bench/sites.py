"""Sites at scale: five sites of 2,000 nodes each (10,000 in all), every node due for a
deploy step, and one worker per site claiming its own site's rows the way the runner does
(`drive`'s claim with the worker's scope). Measured in the same run on the same engine:

- the baseline: the same workers claiming without a site (any node), as before sites;
- claims per second of 1, 2, ... 5 site workers at once (what one more site adds), and
  each site's own rate;
- whether any worker ever claimed a node of another site (it must be 0).

And whole deploys: the demo's simulated servers (no delay) in the same five sites, six
bare-metal orders per offer, one worker per site as threads against the same five workers
without a site: each site's deploys and node stage steps per second, to its last ready;
then the same again with the 10,000 nodes in the table beside the demo's (in maintenance:
neither placed nor due, but in every index the workers' claims and the orders read).
Prints JSON. `python bench/sites.py [postgresql|sqlite]`."""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import delete, func, insert, select, update

from bench._common import bench_platform, fund, ssh_key
from gpulease.db.tables import Event, Instance, Node, WorkerProcess
from gpulease.demo import seed_demo_fleet
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.orders import ordering as orders
from gpulease.services.platform import sites, workers
from gpulease.worker.pipelines import nodes
from gpulease.worker.pipelines.base import claim_due
from gpulease.worker.runner import Worker

SITES = ("sichuan-1", "sichuan-2", "sichuan-3", "ningxia-1", "huawei-zone")  # a site each
PER_SITE = 2_000
CLAIMS_PER_WORKER = 150


def one_site_per_region(p: Platform) -> None:
    """The default catalog's five regions, each a site of its own."""
    p.catalog = p.catalog.replaced(sites=(), regions=tuple(
        r.model_copy(update={"site": None}) for r in p.catalog.regions))


def build_fleet(p: Platform, due: bool = True) -> None:
    """PER_SITE nodes in each site: every one due for a deploy step, or (`due` False) in
    maintenance, out of every pipeline."""
    now = datetime.now(UTC)
    sealed = p.box.seal("bench")
    state = ({"status": "deploying", "stage": "power_on",
              "next_attempt_at": now - timedelta(seconds=1)} if due else
             {"status": "maintenance", "stage": None, "next_attempt_at": None})
    rows = [{"id": f"node-{site}-{i:04d}", "name": f"bench-{site}-{i:04d}",
             "sku": "h100-80g-x8", "region": site, "pool": "bare_metal", "serial": f"B{i}",
             "bmc_driver": "simulated", "bmc_address": f"simulated://{site}-{i}",
             "bmc_username": "admin", "bmc_password_enc": sealed, **state,
             "generation": 0, "attempts": 0, "created_at": now, "updated_at": now}
            for site in SITES for i in range(PER_SITE)]
    with p.db.write() as s:
        for chunk in range(0, len(rows), 2000):
            s.execute(insert(Node), rows[chunk:chunk + 2000])


def unlock_all(p: Platform) -> None:
    with p.db.write() as s:
        s.execute(update(Node).values(lock_token=None, lock_owner=None, lock_expires_at=None))


def run_workers(p: Platform, site_bound: list[str | None]) -> dict[str, object]:
    """Each entry a worker (its site, or None: no site) claiming CLAIMS_PER_WORKER rows one
    at a time; claims per second in all and per worker, and rows of another site."""
    unlock_all(p)
    owners = [f"w{i}-{site or 'any'}" for i, site in enumerate(site_bound)]
    for owner, site in zip(owners, site_bound, strict=True):
        workers.register(p, owner, 1, site)
    scopes = [sites.scope_of(p, site) for site in site_bound]
    taken: dict[str, list[str]] = {owner: [] for owner in owners}
    seconds: dict[str, float] = {}
    start = threading.Barrier(len(owners) + 1)

    def claim_loop(owner: str, scope: sites.Scope) -> None:
        start.wait()
        t0 = time.perf_counter()
        here = scope.covers(Node.region)
        for _ in range(CLAIMS_PER_WORKER):
            held = claim_due(p, Node, owner, limit=1, due=False, extra=[
                *nodes.PIPELINE.due(p.clock.now()), *([] if here is None else [here])])
            taken[owner] += [c.id for c in held]
        seconds[owner] = time.perf_counter() - t0

    threads = [threading.Thread(target=claim_loop, args=(o, sc))
               for o, sc in zip(owners, scopes, strict=True)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    with p.db.read() as s:
        region = {node: where for node, where in s.execute(select(Node.id, Node.region))}
    strays = sum(1 for owner, site in zip(owners, site_bound, strict=True) if site
                 for node in taken[owner] if region[node] != site)
    claimed = sum(len(v) for v in taken.values())
    return {"workers": len(owners), "claims": claimed,
            "claims_per_s": round(claimed / wall, 1),
            "per_worker_claims_per_s": {o: round(len(taken[o]) / seconds[o], 1)
                                        for o in owners},
            "claims_of_another_site": strays}


ORDERS_PER_OFFER = 6


def deploys(db: str, site_bound: bool, crowded: bool = False) -> dict[str, object]:
    """Six orders per bare-metal offer, delivered by five workers (one per site, or five
    without a site): per site, deploys and node stage steps per second to its last ready;
    `crowded`: with the 10,000 bench nodes in the table too."""
    with bench_platform(db, poll_interval_s=0.02) as p:
        one_site_per_region(p)
        seed_demo_fleet(p, ORDERS_PER_OFFER)  # (it seeds only an empty table)
        if crowded:
            build_fleet(p, due=False)
        created = accounts.create_tenant(p, "bench", accounts.Person("b@example.com", "B"))
        fund(p, created.tenant.id)
        who = accounts.authenticate(p, created.token.token)
        key = ssh_key()
        placed = [orders.place_order(p, who, OrderRequest(
            sku=o.sku, region=o.region, ssh_keys=[key]))[0].id
            for o in p.catalog.offers for _ in range(ORDERS_PER_OFFER)]
        started = datetime.now(UTC)
        crew = [Worker(p, owner=f"w-{site if site_bound else i}",
                       site=site if site_bound else None) for i, site in enumerate(SITES)]
        for worker in crew:
            worker.start(threads=1)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:  # bounded
                with p.db.read() as s:
                    left = s.scalar(select(func.count()).select_from(Instance).where(
                        Instance.id.in_(placed), Instance.ready_at.is_(None)))
                if not left:
                    break
                time.sleep(0.2)
        finally:
            for worker in crew:
                worker.stop()
        with p.db.read() as s:
            ready = s.execute(select(Instance.region, func.count(), func.max(Instance.ready_at))
                              .where(Instance.id.in_(placed)).group_by(Instance.region)).all()
            steps = {region: n for region, n in s.execute(select(Node.region, func.count()).join(
                Event, Event.resource_id == Node.id).where(
                Event.resource == "node", Event.kind == "stage", Event.at >= started)
                .group_by(Node.region))}
            total_nodes = s.scalar(select(func.count()).select_from(Node))
    by_site = {}
    for region, count, last in ready:
        seconds = max((last - started).total_seconds(), 1e-3) if last else None
        by_site[region] = {"deploys": count, "seconds_to_last_ready": round(seconds or 0, 2),
                           "deploys_per_s": round(count / seconds, 2) if seconds else None,
                           "stage_steps_per_s": round(steps.get(region, 0) / seconds, 1)
                           if seconds else None}
    return {"workers": "one per site" if site_bound else "five without a site",
            "nodes_in_table": total_nodes,
            "by_site": by_site}


def measure(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        one_site_per_region(p)
        build_fleet(p)
        baseline = run_workers(p, [None] * len(SITES))  # before sites: any worker, any node
        with p.db.write() as s:  # forget the baseline's workers: no site had its own
            s.execute(delete(WorkerProcess))
        by_count = [run_workers(p, list(SITES[:n])) for n in range(1, len(SITES) + 1)]
    return {"db": db, "nodes": PER_SITE * len(SITES), "sites": len(SITES),
            "claims_per_worker": CLAIMS_PER_WORKER,
            "baseline_unscoped_5_workers": baseline,
            "site_workers": by_count,
            "deploys_baseline": deploys(db, site_bound=False),
            "deploys_site_bound": deploys(db, site_bound=True),
            "deploys_baseline_10k_table": deploys(db, site_bound=False, crowded=True),
            "deploys_site_bound_10k_table": deploys(db, site_bound=True, crowded=True)}


if __name__ == "__main__":
    print(json.dumps([measure(db) for db in (sys.argv[1:] or ["postgresql", "sqlite"])],
                     indent=2))
