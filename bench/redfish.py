"""Redfish figures against sushy-tools' emulator (fake driver), printed as JSON:

- enrollment throughput: 40 BMCs enrolled with 8 at once (credentials, inventory, offer
  comparison, power off, database write), beside the emulator's own rate for plain
  authenticated GETs of a system resource at the same concurrency;
- the control plane's share of a deploy and release: wall time, time inside BMC calls, the
  polling load (BMC calls per second for the deploying node, and in its busiest 10 s),
  and the rest of the worker's own time (claims, transactions, decisions). Waiting for
  power changes to land is waiting on the BMC, not control-plane time;
- GETs per read of a 121-entry SEL that links its entries (a Dell-shaped tree served on
  127.0.0.1, gpulease/testing/redfish_trees/), without and with `$expand`: the first read,
  a read that finds nothing new, and one after three new entries (the cursor's reads).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import bench_platform, free_port, fund, media_server, serve_api, ssh_key
from gpulease.db.claims import Claim
from gpulease.domain.fleet.bmc_events import cursor, new_entries
from gpulease.drivers import redfish as redfish_driver
from gpulease.drivers.redfish_emulator import Rack, start_emulator
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import EnrollRequest, OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.fleet import enrollment
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.redfish_trees.expanding import ExpandingTree, link_the_members
from gpulease.testing.redfish_trees.vendor_trees import write_dell_like, write_sel
from gpulease.worker import runner
from gpulease.worker.pipelines.base import Pipeline

BMCS, PARALLEL = 40, 8
SEL = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"


def enrollment_throughput(db: str) -> dict[str, object]:
    emu = start_emulator(Path(tempfile.mkdtemp()), free_port(), Rack(count=BMCS))
    try:
        with bench_platform(db) as p:
            _, tok = accounts.create_operator(p, "op@bench.io", "Op")
            op = accounts.authenticate(p, tok.token)
            reqs = [EnrollRequest(bmc=emu.system_url(i), username="admin", password="admin",
                                  offer="h100-80g-x8@ningxia-1") for i in range(BMCS)]
            t = time.perf_counter()
            with ThreadPoolExecutor(PARALLEL) as pool:
                views = list(pool.map(lambda r: enrollment.enroll(p, op, r), reqs))
            enroll_s = time.perf_counter() - t
        with httpx.Client(auth=("admin", "admin")) as client:
            def get(i: int) -> None:
                client.get(emu.system_url(i % BMCS)).raise_for_status()
            t = time.perf_counter()
            with ThreadPoolExecutor(PARALLEL) as pool:
                list(pool.map(get, range(BMCS * 5)))
            get_s = time.perf_counter() - t
    finally:
        emu.stop()
    return {"db": db, "bmcs": BMCS, "parallel": PARALLEL,
            "available": sum(v.status == "available" for v in views),
            "enroll_bmcs_per_s": round(BMCS / enroll_s, 1),
            "emulator_get_per_s": round(BMCS * 5 / get_s, 1),
            "gets_per_enrollment_time": round((BMCS * 5 / get_s) / (BMCS / enroll_s), 1)}


def deploy_share(db: str) -> dict[str, object]:
    server, media = media_server()
    emu = start_emulator(Path(tempfile.mkdtemp()), free_port(), Rack(count=1))
    spent = {"bmc": 0.0, "worker": 0.0}
    calls: list[float] = []  # when each BMC call began: the polling load
    original_call = redfish_driver.RedfishBmc._call
    original = runner.PIPELINES

    def timed_call(self, what):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        calls.append(t)
        try:
            return original_call(self, what)
        finally:
            spent["bmc"] += time.perf_counter() - t

    def timed(pipeline: Pipeline) -> Pipeline:
        def step(p: Platform, claim: Claim) -> None:
            t = time.perf_counter()
            try:
                pipeline.step(p, claim)
            finally:
                spent["worker"] += time.perf_counter() - t
        return replace(pipeline, step=step)

    redfish_driver.RedfishBmc._call = timed_call  # type: ignore[method-assign]
    runner.PIPELINES = tuple(timed(pipeline) for pipeline in original)  # each step timed
    try:
        with bench_platform(db, poll_interval_s=0.25) as p:
            p.settings.media_base_url = media
            api = serve_api(p)  # the emulator downloads each config drive from it
            _, tok = accounts.create_operator(p, "op@bench.io", "Op")
            op = accounts.authenticate(p, tok.token)
            # the emulator's server runs no node agent: the stand-in answers for it
            enrollment.enroll(p, op, EnrollRequest(
                bmc=emu.system_url(0), username="admin", password="admin",
                offer="h100-80g-x8@ningxia-1", agent="builtin"))
            created = accounts.create_tenant(p, "bench", accounts.Person("b@bench.io", "B"))
            fund(p, created.tenant.id)  # orders hold their first period
            who = accounts.authenticate(p, created.token.token)
            worker = runner.Worker(p)
            spent.update(bmc=0.0, worker=0.0)
            calls.clear()
            t = time.perf_counter()
            iid = orders.place_order(p, who, OrderRequest(
                sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()]))[0].id
            worker.run_until_idle(timeout_s=120)
            deploy_s = time.perf_counter() - t
            ready = instances.show_instance(p, who, iid).status
            actions.release_instance(p, who, iid)
            worker.run_until_idle(timeout_s=120)
            total_s = time.perf_counter() - t
            api.should_exit = True
    finally:
        redfish_driver.RedfishBmc._call = original_call  # type: ignore[method-assign]
        runner.PIPELINES = original
        emu.stop()
        server.shutdown()
    control = spent["worker"] - spent["bmc"]
    # the busiest 10 s of BMC calls for the one deploying node
    busiest = max((sum(1 for c in calls if a <= c < a + 10) for a in calls), default=0)
    return {"db": db, "status_after_deploy": ready, "deploy_wall_s": round(deploy_s, 2),
            "bmc_calls_per_node": len(calls),
            "bmc_calls_per_s_per_node": round(len(calls) / total_s, 2),
            "bmc_calls_busiest_10_s": busiest,
            "deploy_and_release_wall_s": round(total_s, 2),
            "inside_bmc_calls_s": round(spent["bmc"], 3),
            "control_plane_s": round(control, 3),
            "control_plane_share": round(control / total_s, 4),
            "note": "the fake BMC lands each power change after a random 1-11 s"}


LOG_ENTRIES = 121


def log_reads() -> list[dict[str, object]]:
    entries = [(f"2026-12-05T{i // 60:02d}:{i % 60:02d}:00+00:00", "OK", f"event {i}",
                "SYS1001") for i in range(LOG_ENTRIES)]
    more = [("2026-12-05T09:00:00+00:00", "Critical", f"GPU 3 event {i}", "PCI3001")
            for i in range(3)]
    out = []
    for expand in (False, True):
        root = Path(tempfile.mkdtemp())
        write_dell_like(root)
        write_sel(root, entries)
        link_the_members(root, SEL)
        tree = ExpandingTree(root, expand=expand)
        bmc = redfish_driver.RedfishDriver(timeout_s=5).bmc(BmcEndpoint(
            "xe9680", f"{tree.url}/redfish/v1/Systems/System.Embedded.1", "u", "p"))
        try:
            counted = []
            seen: dict[str, str] = {}
            for step in ("first", "nothing new", "three new"):
                if step == "three new":
                    write_sel(root, entries + more)
                    link_the_members(root, SEL)
                before = sum(tree.requests.values())
                read = bmc.event_log(seen)
                counted.append((step, sum(tree.requests.values()) - before,
                                len(new_entries(read.entries, seen)) if seen else None))
                seen = cursor(read.services, read.entries, seen)
        finally:
            tree.stop()
        out.append({"expand": expand, "entries": LOG_ENTRIES,
                    "gets": {step: n for step, n, _ in counted},
                    "new_entries_found": {step: found for step, _, found in counted}})
    return out


if __name__ == "__main__":
    dbs = sys.argv[1:] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "redfish",
                      "enrollment": [enrollment_throughput(db) for db in dbs],
                      "deploy": [deploy_share(db) for db in dbs],
                      "log_reads": log_reads()}, indent=2))
