"""Tickets' SLA clocks as the worker watches them: operators are warned (e-mail to every
operator, the notice outbox) when a clock has run GPULEASE's support `warn_at` share (80 %
by default) without its milestone, once per clock; a breach is what `/metrics` counts
(gpulease_tickets_breached) and the ticket shows."""

from __future__ import annotations

import logging

from sqlalchemy import select

from gpulease.db.ops_tables import Ticket
from gpulease.platform import Platform
from gpulease.services.notify import OPERATORS
from gpulease.services.tickets import UNRESOLVED, clocks, notice, plan_warning

log = logging.getLogger("gpulease.tickets")


def sweep_ticket_clocks(p: Platform, limit: int = 200) -> int:
    """Warn operators of the clocks at risk; returns how many warnings were filed."""
    now = p.clock.now()
    filed = 0
    with p.db.write() as s:
        due = s.scalars(select(Ticket).where(Ticket.next_warning_at <= now, UNRESOLVED)
                        .order_by(Ticket.next_warning_at).limit(limit)
                        .with_for_update(skip_locked=True)).all()
        for t in due:
            warned = {w for w in t.warned.split(",") if w}
            for c in clocks(t):
                point = c.warning_at(t.opened_at, p.catalog.support.warn_at)
                if c.name in warned or point is None or c.due is None or now < point:
                    continue
                left = (c.due - now).total_seconds()
                when = (f"due in {left / 60:.0f} min" if left > 0
                        else f"breached {-left / 60:.0f} min ago")
                notice(s, OPERATORS, "ops_sla_risk", t,
                       f"{c.name} {when} (at {c.due:%Y-%m-%d %H:%M} UTC): {t.summary}", now)
                log.warning("ticket %s (%s): %s %s", t.id, t.severity, c.name, when)
                warned.add(c.name)
                filed += 1
            t.warned = ",".join(sorted(warned))
            plan_warning(p, t)
    return filed
