"""The monthly invoice run at scale, on PostgreSQL. Prints JSON.

Data (loaded with COPY, not timed): 10,000 tenants with wallets, 100,000 leased
instances (a lease and its month's charge each) and 1,000,000 usage records with their
ledger entries (egress and extra storage, 10 per instance).

Timed, in the same run on the same data:
- the invoice run: draft every tenant's invoice of the month (claim the entries, one line
  per instance/kind/item/price with VAT split per line, totals), then finalize (refresh,
  number, seal), through `services.invoice_run.run_period`;
- the baseline: one SQL aggregation of the same ledger rows, grouped as the lines are, fetched
  into Python. ratio = run ÷ baseline;
- quote latency: `services.quotes.make_quote` in process, p50/p99.

Usage: python bench/invoice_run.py [--tenants N] [--leases-per-tenant N]
[--usage-per-lease N]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select, text

from bench._common import bench_platform, summary_ms
from gpulease.db.money_tables import Invoice, InvoiceLine, LedgerEntry
from gpulease.domain.billing.invoicing import BILLABLE_KINDS
from gpulease.platform import Platform
from gpulease.schemas.money import QuoteRequest
from gpulease.services.catalog import quotes
from gpulease.services.money.invoices import run as invoice_run

PERIOD = "2026-11"
START = datetime(2026, 11, 1, tzinfo=UTC)


class FixedClock:
    def now(self) -> datetime:
        return datetime(2026, 12, 3, 1, 0, tzinfo=UTC)


def load(p: Platform, tenants: int, leases: int, usage: int) -> dict[str, int]:
    """COPY the data set in; returns row counts."""
    raw = p.db.engine.raw_connection()
    cur = raw.cursor()
    now = START
    price = Decimal("7920.00")
    with cur.copy("COPY tenants (id, name, created_at) FROM STDIN") as cp:
        for t in range(tenants):
            cp.write_row((f"t{t:06d}", f"tenant {t}", now))
    with cur.copy("COPY users (id, tenant_id, email, name, role, created_at) FROM STDIN") as cp:
        for t in range(tenants):
            cp.write_row((f"u{t:06d}", f"t{t:06d}", f"a{t}@example.com", "Admin", "admin",
                          now))
    inst_cols = ("id, tenant_id, created_by, kind, sku, region, term, image_id, node_count, "
                 "gpu_count, ssh_keys, status, ordered_at, ready_at, attempts, stage_polls")
    lease_cols = ("id, instance_id, tenant_id, term, unit_price, periods, starts_at, ends_at, "
                  "status, auto_renew, reminders_sent, updated_at")
    with cur.copy(f"COPY instances ({inst_cols}) FROM STDIN") as cp:
        for t in range(tenants):
            for k in range(leases):
                cp.write_row((f"i{t:06d}{k:03d}", f"t{t:06d}", f"u{t:06d}", "bare_metal",
                              "rtx4090-24g-x8", "sichuan-2", "month", "img", 1, 8, "",
                              "ready", now, now + timedelta(hours=k), 0, 0))
    with cur.copy(f"COPY leases ({lease_cols}) FROM STDIN") as cp:
        for t in range(tenants):
            for k in range(leases):
                start = now + timedelta(hours=k)
                cp.write_row((f"l{t:06d}{k:03d}", f"i{t:06d}{k:03d}", f"t{t:06d}", "month",
                              price, 1, start, start + timedelta(days=30), "active", False,
                              "", start))
    led_cols = ("tenant_id, at, kind, amount, balance_after, reference, instance_id, item, "
                "quantity, unit, unit_price, service_at")
    use_cols = ("tenant_id, key, instance_id, kind, quantity, unit_price, amount, started_at, "
                "ended_at, recorded_at, source")
    balance: dict[str, Decimal] = {}
    with cur.copy(f"COPY ledger_entries ({led_cols}) FROM STDIN") as cp:
        for t in range(tenants):
            tid, bal = f"t{t:06d}", Decimal("1000000.00")
            cp.write_row((tid, now, "topup", bal, bal, f"wire {t}", None, None, None, None,
                          None, None))
            for k in range(leases):
                iid, at = f"i{t:06d}{k:03d}", now + timedelta(hours=k)
                bal -= price
                cp.write_row((tid, at, "charge", -price, bal, f"first month of {iid}", iid,
                              f"rtx4090-24g-x8 · sichuan-2 · first month of {iid}",
                              Decimal(1), "server", None, None))
                for u in range(usage):
                    egress = u % 2 == 0
                    qty = Decimal(10 + u)
                    unit_price = Decimal("0.50") if egress else Decimal("0.35") / 30
                    amount = (qty * unit_price).quantize(Decimal("0.01"))
                    bal -= amount
                    svc = at + timedelta(days=u + 1)
                    cp.write_row((tid, svc, "usage", -amount, bal, f"usage {iid}-{u}", iid,
                                  f"{'Data egress' if egress else 'Extra storage'} · {iid}",
                                  qty, "GB" if egress else "GB-day",
                                  unit_price.quantize(Decimal("0.000001")), svc))
            balance[tid] = bal
    with cur.copy(f"COPY usage_records ({use_cols}) FROM STDIN") as cp:
        for t in range(tenants):
            for k in range(leases):
                iid, at = f"i{t:06d}{k:03d}", now + timedelta(hours=k)
                for u in range(usage):
                    egress = u % 2 == 0
                    qty = Decimal(10 + u)
                    unit_price = Decimal("0.50") if egress else Decimal("0.35") / 30
                    svc = at + timedelta(days=u + 1)
                    cp.write_row((f"t{t:06d}", f"{iid}-{u}", iid,
                                  "egress_gb" if egress else "storage_gb_days", qty,
                                  unit_price.quantize(Decimal("0.000001")),
                                  (qty * unit_price).quantize(Decimal("0.01")), svc,
                                  svc + timedelta(hours=1), svc, "bench"))
    with cur.copy("COPY wallets (tenant_id, balance, credit_limit, updated_at) FROM STDIN"
                  ) as cp:
        for tid, bal in balance.items():
            cp.write_row((tid, bal, Decimal(0), now))
    raw.commit()
    cur.execute("ANALYZE")
    raw.commit()
    raw.close()
    return {"tenants": tenants, "leases": tenants * leases,
            "usage_records": tenants * leases * usage,
            "ledger_entries": tenants * (1 + leases * (1 + usage))}


def baseline_s(p: Platform) -> tuple[float, int]:
    """One GROUP BY over the same entries, grouped like the invoice lines, fetched."""
    service = func.coalesce(LedgerEntry.service_at, LedgerEntry.at)
    label = func.coalesce(LedgerEntry.item, LedgerEntry.reference, LedgerEntry.kind)
    q = (select(LedgerEntry.tenant_id, LedgerEntry.kind, LedgerEntry.instance_id, label,
                LedgerEntry.unit, LedgerEntry.unit_price, func.sum(LedgerEntry.amount),
                func.sum(LedgerEntry.quantity), func.min(service), func.max(service),
                func.count())
         .where(LedgerEntry.kind.in_(BILLABLE_KINDS), LedgerEntry.invoice_id.is_(None),
                service < datetime(2026, 12, 1, tzinfo=UTC))
         .group_by(LedgerEntry.tenant_id, LedgerEntry.kind, LedgerEntry.instance_id, label,
                   LedgerEntry.unit, LedgerEntry.unit_price))
    t = time.perf_counter()
    with p.db.read() as s:
        rows = s.execute(q).all()
    return time.perf_counter() - t, len(rows)


def quote_latency(p: Platform, n: int = 2000) -> dict[str, float]:
    req = QuoteRequest(sku="h100-80g-x8", region="ningxia-1", term="month", count=3,
                       add={"public-bandwidth": Decimal(100), "egress": Decimal(500)})
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        quotes.make_quote(p, req)
        samples.append(time.perf_counter() - t)
    return summary_ms(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--leases-per-tenant", type=int, default=10)
    ap.add_argument("--usage-per-lease", type=int, default=10)
    args = ap.parse_args()
    with bench_platform("postgresql") as p:
        p.clock = FixedClock()  # type: ignore[assignment]
        t = time.perf_counter()
        rows = load(p, args.tenants, args.leases_per_tenant, args.usage_per_lease)
        load_s = time.perf_counter() - t
        with p.db.read() as s:
            expected = -Decimal(str(s.scalar(select(func.sum(LedgerEntry.amount)).where(
                LedgerEntry.kind.in_(BILLABLE_KINDS)))))
        base_s, groups = baseline_s(p)
        draft = invoice_run.run_period(p, PERIOD)
        final = invoice_run.run_period(p, PERIOD, finalize=True)
        base2_s, _ = baseline_s(p)  # claimed now: the same query over no rows, for scale
        with p.db.read() as s:
            total = Decimal(str(s.scalar(select(func.sum(Invoice.total)))))
            lines = s.scalar(select(func.count()).select_from(InvoiceLine)) or 0
            finals = s.scalar(select(func.count()).select_from(Invoice).where(
                Invoice.status == "final")) or 0
            size = s.scalar(text("SELECT pg_database_size(current_database())"))
        print(json.dumps({
            "bench": "invoice_run", "db": "postgresql", "rows": rows,
            "load_s": round(load_s, 1),
            "baseline_one_aggregation_s": round(base_s, 3), "baseline_groups": groups,
            "draft_run_s": draft.seconds, "finalize_run_s": final.seconds,
            "invoices": finals, "invoice_lines": lines,
            "draft_vs_baseline": round(draft.seconds / base_s, 1),
            "draft_plus_finalize_vs_baseline": round((draft.seconds + final.seconds)
                                                     / base_s, 1),
            "tenants_per_s_draft": round(draft.tenants / draft.seconds),
            "invoiced_equals_ledger": total == expected, "invoiced_total": f"{total:.2f}",
            "baseline_after_claim_s": round(base2_s, 3),
            "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "database_mib": round((size or 0) / 2**20),
            "quote": quote_latency(p),
        }, indent=2))


if __name__ == "__main__":
    main()
