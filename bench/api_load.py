"""The API under load: `gpulease serve` (1 and 2 processes) and a `gpulease worker` as real
processes on SQLite and PostgreSQL, a tenant with 50 instances, and N concurrent clients
(default 24, threads with keep-alive connections) running a mixed workload for a fixed time:
the catalog, the instance list (a page of 50), one instance, /api/v1/me, orders and
releases, agent telemetry pushes, and the bare /healthz beside them. Once the worker has
delivered the 50 instances, each path alone (one client, sequential): its p50, and the
cost of a list of 50 against one instance; then each read path with all clients on it, in
slices taken in turn (its requests/s beside /api/v1/me and the bare /healthz); then the
mix. Prints JSON: requests/s, p50 and p99 per path, errors and 5xx, and the issue's marks
computed in the same run. Rate limits are raised out of the way (their cost is still paid
per request); everything listens on 127.0.0.1.

    python bench/api_load.py [--clients 24] [--seconds 30] [--db sqlite postgresql]
                             [--processes 1 2] [--server-cpus 0-7 --client-cpus 8-15]

On a machine with cores to spare, --server-cpus and --client-cpus keep the clients off the
server's cores: on 2 shared cores, 24 closed-loop clients wait in line behind each other
(each path's p50 under load is about 24 ÷ its requests/s), whatever the server does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._common import bench_platform, free_port, fund, pct, ssh_key
from gpulease.demo import seed_demo_fleet
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.orders import ordering as orders

INSTANCES = 50
# share of each client's requests (the rest of one: /healthz, the bare endpoint)
MIX = (("catalog", 0.25), ("list", 0.20), ("one", 0.20), ("me", 0.10),
       ("telemetry", 0.10), ("order", 0.05))


def prepare(p: Platform) -> dict[str, object]:
    """A tenant with 50 one-GPU container instances, its token, and an agent credential."""
    seed_demo_fleet(p, 8)
    created = accounts.create_tenant(p, "load", accounts.Person("load@example.com", "Load"))
    fund(p, created.tenant.id)
    who = accounts.authenticate(p, created.token.token)
    ids = [orders.place_order(p, who, OrderRequest(
        kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[ssh_key()]))[0].id
        for _ in range(INSTANCES)]
    _, op_token = accounts.create_operator(p, "op@load.example.com", "Op")
    operator = accounts.authenticate(p, op_token.token)
    with p.db.read() as s:
        from sqlalchemy import select

        from gpulease.db.tables import Node
        node_id = s.scalar(select(Node.id).where(Node.sku == "h100-80g-x8").limit(1))
    assert node_id is not None
    enrollment = agent_credentials.operator_enrollment(p, operator, node_id)
    _, credential = agent_credentials.register(p, enrollment, "load-node", None, None)
    return {"token": created.token.token, "instances": ids, "agent": credential}


SERVER_CPUS: set[int] | None = None  # --server-cpus: where the API and worker run


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    cpus = SERVER_CPUS
    return subprocess.Popen([sys.executable, "-m", "gpulease.cli.main", *args],
                            env=os.environ | env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)


def cpu_list(text: str) -> set[int]:
    """`0-7` or `0,2,4-6`: a set of CPU numbers."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def wait_up(base: str) -> None:
    for _ in range(600):  # bounded: 60 s
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the API did not come up in 60 s")


def wait_delivered(base: str, token: str) -> float:
    """Seconds until the worker has delivered every instance ordered in `prepare`: the
    single-client figures are not taken while it is still busy delivering 50 of them."""
    started = time.monotonic()
    for _ in range(900):  # bounded: 180 s
        r = httpx.get(f"{base}/api/v1/instances", params={"limit": 50}, timeout=10,
                      headers={"Authorization": f"Bearer {token}"})
        if r.status_code == 200 and all(
                i["status"] in ("ready", "failed") for i in r.json()["items"]):
            return round(time.monotonic() - started, 1)
        time.sleep(0.2)
    raise RuntimeError("the worker did not deliver the instances in 180 s")


def telemetry_body() -> dict[str, object]:
    now = time.time()
    return {"gpus": [{
        "index": 0, "uuid": "GPU-load-0", "name": "NVIDIA H100 80GB HBM3", "samples": 60,
        "start": now - 60, "end": now, "temp_max_c": 61.0, "temp_avg_c": 58.0,
        "power_avg_w": 520.0, "power_max_w": 610.0, "util_avg_pct": 97.0,
        "sm_clock_min_mhz": 1900.0, "sm_clock_max_mhz": 1980.0, "fb_used_max_mib": 70000.0,
        "thermal_throttle_s": 0.0, "power_throttle_s": 0.0, "xids": [], "ecc_sbe_delta": 0,
        "ecc_dbe_delta": 0, "ecc_dbe_total": 0, "remapped_rows_uncorrectable": 0,
        "row_remap_failure": False, "pcie_replay_delta": 0, "nvlink_links": 18,
        "nvlink_down": [], "energy_j": 31000.0}]}


class Load:
    def __init__(self, base: str, setup: dict[str, object]) -> None:
        self.base, self.setup = base, setup
        self.token = str(setup["token"])
        self.ids = list(setup["instances"])  # type: ignore[call-overload]
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.status: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.errors: dict[str, list[str]] = defaultdict(list)
        self.lock = threading.Lock()

    def call(self, client: httpx.Client, path: str) -> None:
        auth = {"Authorization": f"Bearer {self.token}"}
        started = time.perf_counter()
        try:
            if path == "catalog":
                r = client.get("/api/v1/catalog", headers=auth)
            elif path == "list":
                r = client.get("/api/v1/instances", params={"limit": 50}, headers=auth)
            elif path == "one":
                r = client.get(f"/api/v1/instances/{random.choice(self.ids)}", headers=auth)
            elif path == "me":
                r = client.get("/api/v1/me", headers=auth)
            elif path == "telemetry":
                r = client.post("/api/v1/agent/telemetry", json=telemetry_body(),
                                headers={"Authorization": f"Bearer {self.setup['agent']}"})
            elif path == "order":
                r = client.post("/api/v1/instances", headers=auth, json={
                    "kind": "container", "offer": "rtx4090-24g-container", "gpus": 1,
                    "ssh_keys": [ssh_key()]})
                if r.status_code in (201, 202):
                    r = client.post(f"/api/v1/instances/{r.json()['id']}/release",
                                    headers=auth)
            else:
                r = client.get("/healthz")
            code = r.status_code
        except httpx.HTTPError as exc:
            code = 0
            with self.lock:
                self.errors[path].append(repr(exc)[:200])
        spent = time.perf_counter() - started
        with self.lock:
            self.lat[path].append(spent)
            self.status[path][code] += 1

    def single(self, rounds: int = 60) -> dict[str, float]:
        """Each read path alone, one client: p50 ms."""
        out = {}
        with httpx.Client(base_url=self.base, timeout=30) as client:
            for path in ("healthz", "me", "catalog", "one", "list"):
                self.lat.pop(path, None)
                for _ in range(rounds):
                    self.call(client, path)
                out[path] = round(pct(self.lat[path], 50) * 1000, 2)
        self.lat.clear()
        self.status.clear()
        return out

    def run(self, clients: int, seconds: float,
            mix: tuple[tuple[str, float], ...] = MIX) -> float:
        """`clients` threads for `seconds`, each request drawn from `mix` (the rest of one:
        /healthz). The latencies and statuses collected so far are cleared first."""
        self.lat.clear()
        self.status.clear()
        self.errors.clear()
        stop = time.monotonic() + seconds
        paths, weights = zip(*mix, strict=True)
        rest = max(0.0, 1 - sum(weights))

        def client_loop(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=self.base, timeout=60) as client:
                while time.monotonic() < stop:
                    path = rng.choices((*paths, "healthz"), (*weights, rest))[0]
                    self.call(client, path)

        threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(clients)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        return time.monotonic() - started


READS = ("healthz", "me", "catalog", "one", "list")


def path_row(lat: list[float], codes: dict[int, int], errors: int, wall: float
             ) -> dict[str, object]:
    return {"requests_per_s": round(len(lat) / wall, 1),
            "p50_ms": round(pct(lat, 50) * 1000, 1), "p99_ms": round(pct(lat, 99) * 1000, 1),
            "n": len(lat), "status": {str(k): v for k, v in sorted(codes.items())},
            "errors": errors, "5xx": sum(v for k, v in codes.items() if k >= 500)}


def table(load: Load, wall: float) -> dict[str, dict[str, object]]:
    return {path: path_row(lat, load.status[path], len(load.errors[path]), wall)
            for path, lat in sorted(load.lat.items())}


def each_alone(load: Load, clients: int, seconds_each: float, rounds: int = 4
               ) -> dict[str, dict[str, object]]:
    """Each read path with every client on it, in `rounds` slices per path taken in turn
    (forwards, then backwards): a machine whose speed drifts during the run weighs on every
    path alike, so their ratios hold better than with one block per path."""
    lat: dict[str, list[float]] = defaultdict(list)
    codes: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    errors: dict[str, int] = defaultdict(int)
    wall: dict[str, float] = defaultdict(float)
    for n in range(rounds):
        for path in READS if n % 2 == 0 else tuple(reversed(READS)):
            wall[path] += load.run(clients, seconds_each / rounds, ((path, 1.0),))
            lat[path] += load.lat[path]
            for code, count in load.status[path].items():
                codes[path][code] += count
            errors[path] += len(load.errors[path])
    return {path: path_row(lat[path], codes[path], errors[path], wall[path]) for path in READS}


def one_run(db: str, processes: int, clients: int, seconds: float,
            seconds_each: float) -> dict[str, object]:
    with bench_platform(db) as p:
        setup = prepare(p)
        url, data = p.settings.database_url, p.settings.data_dir
        p.db.dispose()
        port = free_port()
        env = {"GPULEASE_DATABASE_URL": url, "GPULEASE_SECRET_KEY": p.settings.secret_key,
               "GPULEASE_RATE_LIMIT_PER_TOKEN_PER_MIN": str(10**9),
               "GPULEASE_RATE_LIMIT_ANONYMOUS_PER_MIN": str(10**9),
               "GPULEASE_DEMO_DELAY_S": "0", "GPULEASE_SIMULATED_HARDWARE": "true"}
        api = start(["serve", "--data-dir", str(data), "--port", str(port), "--workers",
                     str(processes)], env)
        worker = start(["worker", "--data-dir", str(data)], env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_up(base)
            delivered_s = wait_delivered(base, str(setup["token"]))
            load = Load(base, setup)
            single = load.single()
            alone = each_alone(load, clients, seconds_each)
            wall = load.run(clients, seconds)
            mixed = table(load, wall)
        finally:
            for proc in (api, worker):
                proc.send_signal(signal.SIGTERM)
            for proc in (api, worker):
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
    rps = {path: float(v["requests_per_s"]) for path, v in alone.items()}  # type: ignore[arg-type]
    everything = list(alone.values()) + list(mixed.values())
    marks = {
        "list_50_over_one_single_client": round(single["list"] / single["one"], 2),
        "list_vs_me_under_load": round(rps["list"] / rps["me"], 2),
        "catalog_vs_me_under_load": round(rps["catalog"] / rps["me"], 2),
        "errors": sum(int(v["errors"]) for v in everything),  # type: ignore[call-overload]
        "5xx": sum(int(v["5xx"]) for v in everything),  # type: ignore[call-overload]
        "worst_p99_over_single_p50": max(
            (round(float(alone[path]["p99_ms"]) / single[path], 1), path)  # type: ignore[arg-type]
            for path in single),
    }
    return {"db": db, "api_processes": processes, "clients": clients,
            "delivered_before_measuring_s": delivered_s, "single_client_p50_ms": single,
            "each_path_alone": alone,
            "mixed": {"seconds": round(wall, 1), "paths": mixed}, "marks": marks}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=20.0, help="the mixed run")
    parser.add_argument("--seconds-each", type=float, default=8.0,
                        help="each read path alone")
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--processes", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--server-cpus", type=cpu_list, default=None,
                        help="CPUs for the API processes and the worker (e.g. 0-7)")
    parser.add_argument("--client-cpus", type=cpu_list, default=None,
                        help="CPUs for the clients, apart from the server's (e.g. 8-15)")
    args = parser.parse_args()
    global SERVER_CPUS
    SERVER_CPUS = args.server_cpus
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)
    runs = [one_run(db, n, args.clients, args.seconds, args.seconds_each) for db in args.db
            for n in args.processes]
    cpus = {"machine": os.cpu_count(),
            "server": sorted(args.server_cpus) if args.server_cpus else "any",
            "clients": sorted(args.client_cpus) if args.client_cpus else "any"}
    print(json.dumps({"bench": "api_load", "cpus": cpus, "runs": runs,
                      "targets": {"list_50_over_one_single_client": "≤ 3",
                                  "list_vs_me_under_load": "≥ 0.3",
                                  "catalog_vs_me_under_load": "≥ 0.8",
                                  "errors": 0, "5xx": 0,
                                  "worst_p99_over_single_p50": "≤ 10"}}, indent=2))


if __name__ == "__main__":
    main()
