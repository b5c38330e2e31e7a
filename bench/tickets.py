"""Tickets: the cost of opening one from an alert in the telemetry ingest path, and of
listing open tickets among 10,000. Prints JSON, on SQLite and PostgreSQL:

- ingest: one push of 8 GPU summaries (as an agent sends it) that raises a new alert and so
  opens a P1 ticket (with its evidence and notices), beside a healthy push of the same node
  in the same run (the baseline); each faulty push is followed by a healthy one that
  clears the alert, and the ticket is resolved, so every faulty push opens a new ticket;
- list: an operator's first page (100) of open tickets and a tenant's own page, with
  10,000 open tickets across 100 tenants, beside a COUNT(*) of the same rows.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, insert, select

from bench._common import bench_platform, summary_ms
from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.db.ops_tables import Ticket
from gpulease.db.tables import Node
from gpulease.demo import seed_demo_fleet
from gpulease.schemas.tickets import TicketAction
from gpulease.services.accounts import identity as accounts
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.support import tickets
from gpulease.services.telemetry import pushes

PUSHES = 60
OPEN = 10_000
TENANTS = 100
LISTS = 60


def window(faults: list[str]) -> list[dict[str, object]]:
    gpus = SimulatedGpus(8, faults=parse_faults(faults), clock=VirtualClock())
    gpus.load = 0.7
    sampler = Sampler(gpus)
    for _ in range(30):
        sampler.sweep()
        gpus.clock.advance(1.0)  # type: ignore[attr-defined]
    return [g.as_dict() for g in sampler.summaries()]


def ingest(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        seed_demo_fleet(p, 1)
        _, op_token = accounts.create_operator(p, "bench-op@example.com", "Op")
        op = accounts.authenticate(p, op_token.token or "")
        with p.db.write() as s:
            node_id = s.scalars(select(Node.id).order_by(Node.name)).first()
            assert node_id is not None
            token = agent_credentials.mint_enrollment(s, node_id, None, p.clock.now())
        _, credential = agent_credentials.register(p, token, "bench", None, None)
        healthy, faulty = window([]), window(["xid79:3"])
        pushes.ingest(p, credential, healthy)  # warm
        healthy_s, faulty_s = [], []
        for _ in range(PUSHES):
            t = time.perf_counter()
            raised = pushes.ingest(p, credential, faulty)
            faulty_s.append(time.perf_counter() - t)
            assert any(a["kind"] == "gpu_fell_off_bus" for a in raised)
            t = time.perf_counter()
            pushes.ingest(p, credential, healthy)
            healthy_s.append(time.perf_counter() - t)
            (opened,) = tickets.list_tickets(p, op, tickets.OPEN).items
            tickets.resolve(p, op, opened.id, TicketAction())
        with p.db.read() as s:
            made = s.scalar(select(func.count()).select_from(Ticket))
        assert made == PUSHES
        return {"pushes": PUSHES, "tickets_opened": made,
                "push_opening_a_ticket": summary_ms(faulty_s),
                "healthy_push_baseline": summary_ms(healthy_s)}


def listing(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        _, op_token = accounts.create_operator(p, "bench-op@example.com", "Op")
        op = accounts.authenticate(p, op_token.token or "")
        tenants = [accounts.create_tenant(p, f"bench-{i}", accounts.Person(f"a{i}@bench.example",
                                                                           "A"))
                   for i in range(TENANTS)]
        now = p.clock.now()
        rows = [{"id": f"tk-{i:012x}", "tenant_id": tenants[i % TENANTS].tenant.id,
                 "instance_id": None, "node_id": None, "gpu_index": i % 8,
                 "kind": "tenant_report", "severity": ("P1", "P2", "P3")[i % 3],
                 "summary": f"bench ticket {i}", "status": "open", "opened_by": "bench",
                 "opened_at": now - timedelta(seconds=i), "warned": "",
                 "response_due": now + timedelta(minutes=15),
                 "resolution_due": now + timedelta(hours=72), "updated_at": now}
                for i in range(OPEN)]
        with p.db.write() as s:
            s.execute(insert(Ticket), rows)
        tenant = accounts.authenticate(p, tenants[0].token.token or "")
        tickets.list_tickets(p, op, tickets.OPEN)  # warm
        op_s, tenant_s, count_s = [], [], []
        for _ in range(LISTS):
            t = time.perf_counter()
            page = tickets.list_tickets(p, op, tickets.OPEN, limit=100)
            op_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            own = tickets.list_tickets(p, tenant, tickets.OPEN, limit=100)
            tenant_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            with p.db.read() as s:
                s.scalar(select(func.count()).select_from(Ticket).where(
                    Ticket.status != "resolved"))
            count_s.append(time.perf_counter() - t)
        assert page.total == OPEN and len(page.items) == 100
        assert own.total == OPEN // TENANTS
        return {"open_tickets": OPEN, "tenants": TENANTS, "page": 100,
                "operator_first_page": summary_ms(op_s),
                "tenant_own_page": summary_ms(tenant_s),
                "count_baseline": summary_ms(count_s)}


def main() -> None:
    dbs = [a for a in sys.argv[1:] if a in ("sqlite", "postgresql")] or ["sqlite", "postgresql"]
    print(json.dumps({"bench": "tickets", "ingest": {db: ingest(db) for db in dbs},
                      "list": {db: listing(db) for db in dbs}}, indent=2))


if __name__ == "__main__":
    main()
