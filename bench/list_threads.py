"""A page of 50 instances read by several threads of one process at once, without HTTP:
`list_instances(limit=50)` plus its JSON, a fixed number of calls spread over 1, 2, 4 and 8
threads, on SQLite and PostgreSQL; the process's CPU time and the wall time per call. The
baseline is one thread in the same run: what concurrent readers of one process cost. On
SQLite, once per `--read-slots` value (GPULEASE_SQLITE_READ_SLOTS; 0: reads do not queue).

    python bench/list_threads.py [--calls 480] [--rounds 2] [--db sqlite postgresql]
                                 [--read-slots 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_platform
from bench.api_load import prepare
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.instances import views as instances

THREADS = (1, 2, 4, 8)


def spread(p: Platform, token: str, calls: int, threads: int) -> dict[str, float]:
    """`calls` lists over `threads` threads: CPU and wall ms per call."""
    who = accounts.authenticate(p, token)

    def read(n: int) -> None:
        for _ in range(n):
            instances.list_instances(p, who, limit=50).model_dump_json()

    workers = [threading.Thread(target=read, args=(calls // threads,)) for _ in range(threads)]
    cpu, wall = time.process_time(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done = calls // threads * threads
    return {"cpu_ms_per_call": round((time.process_time() - cpu) / done * 1000, 2),
            "wall_ms_per_call": round((time.perf_counter() - wall) / done * 1000, 2)}


def one_db(db: str, calls: int, rounds: int, read_slots: int) -> dict[str, object]:
    with bench_platform(db, sqlite_read_slots=read_slots) as p:
        token = str(prepare(p)["token"])
        spread(p, token, 50, 1)  # warm
        runs = [{str(n): spread(p, token, calls, n) for n in THREADS} for _ in range(rounds)]
    def over_one(measure: str) -> list[float]:
        return [round(r["8"][measure] / r["1"][measure], 2) for r in runs]

    return {"db": db, "sqlite_read_slots": read_slots if db == "sqlite" else None,
            "rounds": runs, "cpu_per_call_8_threads_over_1": over_one("cpu_ms_per_call"),
            "wall_per_call_8_threads_over_1": over_one("wall_ms_per_call")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=480)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--read-slots", nargs="+", type=int, default=[2],
                        help="SQLite: read transactions a process runs at once (0: no queue)")
    args = parser.parse_args()
    print(json.dumps({"bench": "list_threads", "baseline": "1 thread, same run",
                      "runs": [one_db(db, args.calls, args.rounds, slots) for db in args.db
                               for slots in (args.read_slots if db == "sqlite" else [2])]},
                     indent=2))


if __name__ == "__main__":
    main()
