"""Tickets' SLA clocks as the worker watches them. Operators are warned (e-mail to every
operator, their webhook) when a clock has run the support terms' `warn_at` share (80 % by
default) without its milestone; when it breaches, the breach is escalated: operators again,
and the escalation contacts (`GPULEASE_ESCALATION_EMAILS`, e.g. the duty manager). Once per
clock each. A breach is also what `/metrics` counts (gpulease_tickets_breached) and the
ticket shows."""

from __future__ import annotations

import logging

from sqlalchemy import select

from gpulease.db.ops_tables import Ticket
from gpulease.domain.phrases import phrase
from gpulease.domain.tickets import BREACHED
from gpulease.ports.records import Priced
from gpulease.services.platform.notify import OPERATORS
from gpulease.services.support.tickets import UNRESOLVED, clocks, notice, plan_warning

log = logging.getLogger("gpulease.tickets")


def sweep_ticket_clocks(p: Priced, limit: int = 200) -> int:
    """Warn operators of the clocks at risk and escalate the breached ones; returns how
    many notices were filed."""
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
                if point is None or c.due is None or now < point:
                    continue
                at = f"{c.due:%Y-%m-%d %H:%M}"
                if now > c.due and c.name + BREACHED not in warned:
                    notice(s, OPERATORS, "ops_sla_breach", t, phrase(
                        "{clock} breached {minutes} min ago (due {at} UTC): {summary}",
                        clock=phrase(c.name), minutes=f"{(now - c.due).total_seconds() / 60:.0f}",
                        at=at, summary=t.summary), now)
                    log.warning("ticket %s (%s): %s breached", t.id, t.severity, c.name)
                    warned |= {c.name, c.name + BREACHED}  # a late risk warning is moot
                    filed += 1
                elif now <= c.due and c.name not in warned:
                    notice(s, OPERATORS, "ops_sla_risk", t, phrase(
                        "{clock} due in {minutes} min (at {at} UTC): {summary}",
                        clock=phrase(c.name), minutes=f"{(c.due - now).total_seconds() / 60:.0f}",
                        at=at, summary=t.summary), now)
                    log.warning("ticket %s (%s): %s at risk", t.id, t.severity, c.name)
                    warned.add(c.name)
                    filed += 1
            t.warned = ",".join(sorted(warned))
            plan_warning(p, t)
    return filed
