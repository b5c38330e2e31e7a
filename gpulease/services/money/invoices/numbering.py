"""Invoice and credit-note numbers (gapless per series and year) and the digest that seals
a final document."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from gpulease.db.money_tables import InvoiceSequence


def next_numbers(s: Session, series: str, count: int) -> list[str]:
    """Take `count` consecutive numbers of `series` (locked: gapless under concurrency)."""
    row = s.get(InvoiceSequence, series, with_for_update=True)
    if row is None:
        row = InvoiceSequence(series=series, last=0)
        s.add(row)
        s.flush()
    first = row.last + 1
    row.last += count
    return [f"{series}-{n:06d}" for n in range(first, first + count)]


def digest(number: str | None, tenant_id: str, period: str,
            sums: tuple[Decimal, Decimal, Decimal], lines: Iterable[tuple[Any, ...]]) -> str:
    """sha256 over the invoice's number, tenant, period, totals and lines."""
    net, vat, total = sums
    doc = {"number": number, "tenant": tenant_id, "period": period, "net": f"{net:.2f}",
           "vat": f"{vat:.2f}", "total": f"{total:.2f}",
           "lines": [[seq, text, f"{n:.2f}", f"{v:.2f}", f"{g:.2f}"]
                     for seq, text, n, v, g in sorted(lines, key=lambda x: x[0])]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
