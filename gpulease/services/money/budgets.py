"""Budgets: a tenant's admin sets the most the tenant may spend in a calendar month (the
platform's time zone; prices as the price book shows them, VAT included where it is).
What counts is what this month's ledger holds for orders, renewals, usage, credits and
refunds (an order's held first period included). The admins are told at 50, 80 and 100 %
(once each a month; webhook events `billing.budget_50` …); an order or a renewal by hand
that would take the month past the budget is refused (409, nothing written), checked in
its own transaction after its money is taken, under the wallet's lock, so two at once
cannot both slip under it. Bare metal already running is never stopped by a budget: its
automatic renewal goes on (its lease is paid), and the notices say so."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Budget, BudgetNotice, LedgerEntry
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.proration import period_bounds, period_of
from gpulease.domain.errors import BudgetExceeded
from gpulease.domain.phrases import Phrase, phrase
from gpulease.lifecycle.history import by
from gpulease.ports.records import Records
from gpulease.schemas.money import BudgetView
from gpulease.services.platform.outbox import Notice, post_notice

LEVELS = (50, 80, 100)
# what a month's spend is made of: money out, less money back (a hold and its release net)
SPENT = ("charge", "usage", "credit", "refund", "hold", "hold_release")


def month_spend(s: Session, p: Records, tenant_id: str, now: datetime) -> tuple[str, Decimal]:
    """(this month, what the tenant spent in it)."""
    period = period_of(now, p.settings.zone)
    start, end = period_bounds(period, p.settings.zone)
    total = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
        LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind.in_(SPENT),
        LedgerEntry.at >= start, LedgerEntry.at < end))
    return period, to_fen(-Decimal(total or 0))


def budget_of(s: Session, tenant_id: str) -> Decimal | None:
    return s.scalar(select(Budget.monthly).where(Budget.tenant_id == tenant_id))


def check_spend(s: Session, p: Records, tenant_id: str, budget: Decimal, what: Phrase,
                now: datetime) -> None:
    """Inside an order's or a renewal's transaction, its money already taken (the wallet
    locked): refuse it when the month's spend is now past the budget."""
    period, spent = month_spend(s, p, tenant_id, now)
    if spent > budget:
        raise BudgetExceeded(
            "This {what} would take {period}'s spending to ¥{spent:,.2f}, past your monthly "
            "budget of ¥{budget:,.2f}; nothing was charged. A tenant admin can raise the "
            "budget (`gpulease budget --set AMOUNT`).", what=what, period=period,
            spent=spent, budget=budget)


def set_budget(p: Records, actor: Principal, monthly: Decimal | None) -> BudgetView:
    """A tenant admin sets (or with None removes) the tenant's monthly budget."""
    tenant = actor.require_tenant_admin()
    with p.db.write() as s:
        row = s.get(Budget, tenant)
        if monthly is None:
            if row is not None:
                s.delete(row)
        elif row is None:
            s.add(Budget(tenant_id=tenant, monthly=to_fen(monthly), set_by=by(actor),
                         set_at=p.clock.now()))
        else:
            row.monthly, row.set_by, row.set_at = to_fen(monthly), by(actor), p.clock.now()
    return show_budget(p, actor)


def show_budget(p: Records, actor: Principal) -> BudgetView:
    tenant = actor.require_tenant()
    now = p.clock.now()
    with p.db.read() as s:
        budget = budget_of(s, tenant)
        period, spent = month_spend(s, p, tenant, now)
        told = list(s.scalars(select(BudgetNotice.level).where(
            BudgetNotice.tenant_id == tenant, BudgetNotice.period == period)
            .order_by(BudgetNotice.level)))
    return BudgetView(monthly_budget=budget, period=period, spent=spent,
                      spent_pct=round(float(100 * spent / budget), 1) if budget else None,
                      told=told)


def notice_budgets(p: Records) -> int:
    """Tell each tenant with a budget the levels its month's spend reached and it was not
    told yet this month; returns how many notices were posted."""
    now = p.clock.now()
    posted = 0
    with p.db.write() as s:
        for tenant, budget in s.execute(select(Budget.tenant_id, Budget.monthly)).all():
            period, spent = month_spend(s, p, tenant, now)
            told = set(s.scalars(select(BudgetNotice.level).where(
                BudgetNotice.tenant_id == tenant, BudgetNotice.period == period)))
            for level in LEVELS:
                if level in told or budget <= 0 or 100 * spent < level * budget:
                    continue
                text = phrase(
                    "You have spent ¥{spent:,.2f} of your ¥{budget:,.2f} budget for {period} "
                    "({level}%).", spent=spent, budget=budget, period=period, level=level)
                if level == 100:
                    text = phrase("{text} New orders and renewals by hand are refused until "
                                  "next month or until an admin raises the budget; rented "
                                  "servers keep running and renewing.", text=text)
                post_notice(s, Notice(tenant, f"budget_{level}", text), now)
                s.add(BudgetNotice(tenant_id=tenant, period=period, level=level,
                                   sent_at=now))
                posted += 1
    return posted
