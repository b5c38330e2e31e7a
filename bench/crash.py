"""Crashes and freezes against real BMCs: two worker processes (`gpulease worker`) deliver
and clean servers behind sushy-tools' Redfish emulator while tenants order and release, and
one worker at a time is frozen with SIGSTOP for longer than its lock (then SIGCONT), now
and then killed with SIGKILL and started again. In front of the emulator stands a witness
(gpulease/testing/bmc_witness.py) that judges every request changing a server, as it
arrives and before passing it on, by the claim it names: a change made under a claim the
database no longer holds is a late hardware call. Afterwards: late calls, changes the
fence stopped (at the step's check, and at the request, after a freeze between the two:
each of those would have been a late call without the per-request check), GPUs held twice,
PostgreSQL's deadlock count over the run, and how far the orders got.

`python bench/crash.py [seconds] [sqlite|postgresql]` (PostgreSQL by default; run it alone
on the database: the deadlock count is the database's). Prints JSON."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from bench._common import bench_platform, free_port, fund, media_server, serve_api, ssh_key
from gpulease.domain.errors import DomainError
from gpulease.drivers.redfish_emulator import Rack, start_emulator
from gpulease.platform import Platform
from gpulease.schemas import EnrollRequest, OrderRequest
from gpulease.services.accounts import identity as accounts
from gpulease.services.fleet import enrollment
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.bmc_witness import RecordingProxy, claim_still_held
from gpulease.testing.factories import double_allocated_gpus

SERVERS, WORKERS, TTL_S = 6, 2, 3.0
OFFER = ("h100-80g-x8", "ningxia-1")


def deadlocks(p: Platform) -> int | None:
    if p.db.engine.dialect.name != "postgresql":
        return None
    with p.db.read() as s:
        return int(s.scalar(text("SELECT deadlocks FROM pg_stat_database "
                                 "WHERE datname = current_database()")) or 0)


def start_worker(p: Platform, n: int, logs: Path) -> subprocess.Popen[bytes]:
    st = p.settings
    env = {**os.environ, "GPULEASE_DATABASE_URL": st.database_url,
           "GPULEASE_SECRET_KEY": st.secret_key, "GPULEASE_DATA_DIR": str(st.data_dir),
           "GPULEASE_SIMULATED_HARDWARE": "true", "GPULEASE_LOCK_TTL_S": str(TTL_S),
           "GPULEASE_POLL_INTERVAL_S": "0.1", "GPULEASE_DEMO_DELAY_S": "0",
           "GPULEASE_PUBLIC_URL": st.public_url, "GPULEASE_MEDIA_BASE_URL": st.media_base_url,
           "GPULEASE_MIGRATE_AT_START": "false", "GPULEASE_LOG_FORMAT": "text",
           "GPULEASE_BACKOFF_BASE_S": "0.2", "GPULEASE_BACKOFF_MAX_S": "2"}
    out = (logs / f"worker-{n}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "gpulease.cli.main", "worker",
                             "--threads", "2"], env=env, stdout=out, stderr=out)


def tenants_order_and_release(p: Platform, seconds: float, outcomes: Counter[str]) -> None:
    created = accounts.create_tenant(p, "crash", accounts.Person("c@bench.io", "C"))
    fund(p, created.tenant.id)
    who = accounts.authenticate(p, created.token.token)
    key, live = ssh_key(), list[str]()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded
        try:
            if len(live) < SERVERS - 1:
                live.append(orders.place_order(p, who, OrderRequest(
                    sku=OFFER[0], region=OFFER[1], ssh_keys=[key]))[0].id)
                outcomes["ordered"] += 1
            for iid in list(live):
                status = instances.show_instance(p, who, iid).status
                if status in ("ready", "failed"):
                    outcomes[status] += 1
                    actions.release_instance(p, who, iid)
                    live.remove(iid)
        except DomainError as exc:
            outcomes[type(exc).__name__] += 1
        time.sleep(0.5)


def chaos(workers: list[subprocess.Popen[bytes]], restart: object, seconds: float,
          done: Counter[str]) -> None:
    rng = random.Random(7)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline - 10:  # bounded; the last seconds run undisturbed
        time.sleep(rng.uniform(1.0, 4.0))
        i = rng.randrange(len(workers))
        if rng.random() < 0.15:  # a crash: killed, started again
            workers[i].send_signal(signal.SIGKILL)
            workers[i].wait(10)
            workers[i] = restart(i)  # type: ignore[operator]
            done["killed"] += 1
            continue
        workers[i].send_signal(signal.SIGSTOP)  # frozen past its lock: taken over
        time.sleep(rng.uniform(TTL_S * 1.3, TTL_S * 3))
        workers[i].send_signal(signal.SIGCONT)
        done["frozen"] += 1


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGCONT)
            w.terminate()
            w.wait(30)


def fenced_in_logs(logs: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for log in logs.glob("worker-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r"fenced: (\S+)", line)
            if m:
                found["at the request" if m.group(1) in ("POST", "PATCH", "PUT", "DELETE",
                                                         "agent")
                      else "at the step's check"] += 1
    return found


def run(seconds: float, db: str) -> dict[str, object]:
    images, media = media_server()
    emu = start_emulator(Path(tempfile.mkdtemp()), free_port(), Rack(SERVERS, "Off", None, 1))
    logs = Path(tempfile.mkdtemp(prefix="gpulease-crash-"))
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with bench_platform(db, lock_ttl_s=TTL_S) as p:
            witness = RecordingProxy(int(emu.url.rsplit(":", 1)[1]),
                                     judge=claim_still_held(p.db))
            api = serve_api(p)
            p.settings.media_base_url = media
            _, tok = accounts.create_operator(p, "op@bench.io", "Op")
            op = accounts.authenticate(p, tok.token)
            for i in range(SERVERS):
                enrollment.enroll(p, op, EnrollRequest(
                    bmc=emu.system_url(i).replace(emu.url, f"http://127.0.0.1:{witness.port}"),
                    username="admin", password="admin", offer="@".join(OFFER),
                    agent="builtin"))
            before = deadlocks(p)
            enrolled = len(witness.changes)
            workers = [start_worker(p, n, logs) for n in range(WORKERS)]
            outcomes: Counter[str] = Counter()
            done: Counter[str] = Counter()
            disturb = threading.Thread(target=chaos, args=(
                workers, lambda i: start_worker(p, i, logs), seconds, done))
            disturb.start()
            tenants_order_and_release(p, seconds, outcomes)
            disturb.join()
            stop(workers)  # before the witness: every request they sent is judged
            after = deadlocks(p)
            changes = witness.changes[enrolled:]
            unclaimed = Counter(re.sub(r"/Systems/[^/]+", "/Systems/*", f"{c[0]} {c[1]}")
                                for c in changes if not c[2])
            result: dict[str, object] = {
                "bench": "crash", "db": db, "seconds": seconds, "servers": SERVERS,
                "workers": WORKERS, "lock_ttl_s": TTL_S,
                "frozen": done["frozen"], "killed": done["killed"],
                "bmc_changes": len(changes),
                "bmc_changes_without_claim": dict(unclaimed),
                "late_hardware_calls": len(witness.late),
                "late_examples": witness.late[:5],
                "fenced": dict(fenced_in_logs(logs)),
                "gpus_held_twice": len(double_allocated_gpus(p)),
                "deadlocks": None if before is None or after is None else after - before,
                "orders": dict(outcomes), "worker_logs": str(logs),
            }
            api.should_exit = True
            witness.stop()
            return result
    finally:
        stop(workers)
        emu.stop()
        images.shutdown()


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    which = sys.argv[2] if len(sys.argv) > 2 else "postgresql"
    print(json.dumps(run(secs, which), indent=2))
