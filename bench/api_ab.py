"""Two builds of the API side by side, under the same load in interleaved slices: a
`gpulease serve` from each source tree on one database (one worker, from the second tree),
the tenant of `api_load.py` with 50 delivered instances, and for each read path N clients
(default 24) for a few seconds on one build, then on the other, alternating which goes first,
several times. On a shared machine whose speed drifts from minute to minute, back-to-back
whole runs differ more than the builds do; slices a few seconds apart see the same machine.
Prints JSON: requests/s per build and path, the second build's over the first's, and each
build's list and catalog over its own /api/v1/me.

    python bench/api_ab.py --before /tmp/old-tree [--after .] [--db sqlite]
                           [--clients 24] [--slices 6] [--slice-s 3] [--processes 1]

Both trees must use the same schema (the database is migrated by the running code).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_platform, free_port
from bench.api_load import Load, prepare, wait_delivered, wait_up

PATHS = ("me", "list", "catalog", "one")


def serve(tree: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A gpulease process from that source tree (its own package first on the path)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", *args], cwd=tree,
        env=os.environ | env | {"PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def compare(db: str, trees: dict[str, Path], clients: int, slices: int, slice_s: float,
            processes: int) -> dict[str, object]:
    with bench_platform(db) as p:
        setup = prepare(p)
        url, data = p.settings.database_url, p.settings.data_dir
        p.db.dispose()
        env = {"GPULEASE_DATABASE_URL": url, "GPULEASE_SECRET_KEY": p.settings.secret_key,
               "GPULEASE_RATE_LIMIT_PER_TOKEN_PER_MIN": str(10**9),
               "GPULEASE_RATE_LIMIT_ANONYMOUS_PER_MIN": str(10**9),
               "GPULEASE_DEMO_DELAY_S": "0", "GPULEASE_SIMULATED_HARDWARE": "true"}
        ports = {name: free_port() for name in trees}
        procs = [serve(tree, ["serve", "--data-dir", str(data), "--port", str(ports[name]),
                              "--workers", str(processes)], env)
                 for name, tree in trees.items()]
        procs.append(serve(trees["after"], ["worker", "--data-dir", str(data)], env))
        try:
            loads = {}
            for name, port in ports.items():
                base = f"http://127.0.0.1:{port}"
                wait_up(base)
                loads[name] = Load(base, setup)
            wait_delivered(f"http://127.0.0.1:{ports['after']}", str(setup["token"]))
            done = {name: {path: [0, 0.0] for path in PATHS} for name in trees}
            for n in range(slices):
                for path in PATHS:
                    order = list(trees) if n % 2 == 0 else list(reversed(trees))
                    for name in order:
                        load = loads[name]
                        took = load.run(clients, slice_s, ((path, 1.0),))
                        ok = sum(v for k, v in load.status[path].items() if k == 200)
                        done[name][path][0] += ok
                        done[name][path][1] += took
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
    rps = {name: {path: round(n / s, 1) for path, (n, s) in paths.items()}
           for name, paths in done.items()}
    return {
        "db": db, "api_processes": processes, "clients": clients,
        "slices": slices, "slice_s": slice_s, "requests_per_s": rps,
        "after_over_before": {path: round(rps["after"][path] / rps["before"][path], 2)
                              for path in PATHS},
        "list_vs_me": {name: round(r["list"] / r["me"], 2) for name, r in rps.items()},
        "catalog_vs_me": {name: round(r["catalog"] / r["me"], 2) for name, r in rps.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="the first source tree")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--db", nargs="+", default=["sqlite"])
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--slices", type=int, default=6)
    parser.add_argument("--slice-s", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs = [compare(db, trees, args.clients, args.slices, args.slice_s, args.processes)
            for db in args.db]
    print(json.dumps({"bench": "api_ab", "trees": {k: str(v) for k, v in trees.items()},
                      "baseline": "the before tree, in slices interleaved with the after's",
                      "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
