"""Spending bounded by the wallet, and dunning. Metered usage is what a tenant consumed, so
it is charged even past the balance; but never silently: the moment a tenant's balance
falls below its credit limit's floor, it is told (notice `overdrawn`) and given
GPULEASE_OVERDRAFT_GRACE_HOURS to top up; after that its running containers are stopped,
its bare-metal instances are flagged to the operator (who decides), and new orders are
refused until the balance is restored. Before that, a `low_balance` notice goes out when
the balance covers fewer than GPULEASE_LOW_BALANCE_HOURS of its running containers. An
unpaid invoice (services/money/payments.py) is reminded on the days of
GPULEASE_DUNNING_REMINDER_DAYS after it was finalized; past GPULEASE_DUNNING_SUSPEND_DAYS
new orders are refused until it is paid. The worker's periodic sweep does all this; the
usage report calls `check_overdraft` at once."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Invoice, LedgerEntry, Wallet
from gpulease.db.tables import Instance, Tenant
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.leases import local_text
from gpulease.domain.billing.money import to_fen
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.domain.states import INSTANCE, InstanceStatus
from gpulease.lifecycle.history import SWEEP_SPENDING, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Moves, Records
from gpulease.schemas.money import DunningView
from gpulease.services.platform.outbox import Notice, post_notice

MONEY_NOTICES = ("low_balance", "overdrawn", "suspended", "restored", "dunning")


def _notice(s: Session, tenant_id: str, kind: str, text: str | Phrase, now: datetime,
            instance_id: str | None = None) -> None:
    post_notice(s, Notice(tenant_id, kind, text, instance_id), now)


def _available(w: Wallet) -> Decimal:
    return to_fen(w.balance + w.credit_limit)


def _running(s: Session, tenant_id: str) -> list[Instance]:
    return list(s.scalars(select(Instance).where(
        Instance.tenant_id == tenant_id, Instance.status == InstanceStatus.READY.value)
        .order_by(Instance.id)))


def _container_costs() -> Any:
    """Per tenant, what its running containers cost an hour (the hour their orders held)."""
    return (select(Instance.tenant_id, (-func.sum(LedgerEntry.amount)).label("cost"))
            .join(LedgerEntry, LedgerEntry.instance_id == Instance.id)
            .where(Instance.kind == "container", Instance.status == InstanceStatus.READY.value,
                   LedgerEntry.kind == "hold")
            .group_by(Instance.tenant_id).subquery())


def hourly_cost(s: Session, tenant_id: str) -> Decimal:
    """What the tenant's running containers cost an hour (the GPU-hour their orders held)."""
    costs = _container_costs()
    cost = s.scalar(select(costs.c.cost).where(costs.c.tenant_id == tenant_id))
    return to_fen(Decimal(str(cost or 0)))


def _low_on_money(s: Session, p: Records, now: datetime) -> set[str]:
    """Tenants whose balance pays fewer than GPULEASE_LOW_BALANCE_HOURS of their running
    containers and who were not warned in the last day: one query, not one per tenant."""
    hours = p.settings.low_balance_hours
    if hours <= 0:
        return set()
    costs = _container_costs()
    available = Wallet.balance + Wallet.credit_limit
    return set(s.scalars(select(Wallet.tenant_id)
                         .join(costs, costs.c.tenant_id == Wallet.tenant_id)
                         .where(available >= 0,
                                available < costs.c.cost * Decimal(str(hours)),
                                Wallet.low_balance_notice_at.is_(None)
                                | (Wallet.low_balance_notice_at <= now - timedelta(days=1)))))


def check_overdraft(s: Session, p: Records, wallet: Wallet, now: datetime) -> None:
    """Tell a tenant the moment its spending passes balance + credit limit (once per
    overdraft), and clear the state when a top-up restored it."""
    zone = p.settings.zone
    if _available(wallet) < 0:
        if wallet.overdrawn_since is None:
            wallet.overdrawn_since = now
            until = now + timedelta(hours=p.settings.overdraft_grace_hours)
            _notice(s, wallet.tenant_id, "overdrawn", phrase(
                "Metered usage took your account ¥{over:,.2f} past its balance and credit "
                "limit (balance ¥{balance:,.2f}). Top up by {until}: after that your running "
                "containers are stopped, your bare-metal machines are reported to the "
                "operator and new orders are refused.", over=-_available(wallet),
                balance=wallet.balance, until=local_text(until, zone)), now)
    elif wallet.overdrawn_since is not None:
        wallet.overdrawn_since = None
        if wallet.suspended_at is not None and (wallet.suspended_reason or "").startswith(
                "overdrawn"):
            wallet.suspended_at, wallet.suspended_reason = None, None
            _notice(s, wallet.tenant_id, "restored", phrase(
                "Your balance is restored (¥{balance:,.2f}); orders are open again.",
                balance=wallet.balance), now)


def _suspend_for_overdraft(s: Session, p: Moves, wallet: Wallet, now: datetime) -> None:
    owed = -_available(wallet)
    reason = (f"overdrawn by ¥{owed:,.2f} since "
              f"{local_text(wallet.overdrawn_since or now, p.settings.zone)} without a top-up")
    wallet.suspended_at, wallet.suspended_reason = now, reason[:500]
    stopped, flagged = [], []
    for inst in _running(s, wallet.tenant_id):
        if inst.kind == "container":
            why = f"suspended: {reason}"
            note(s, now, inst.id, "suspended", why, actor=SWEEP_SPENDING)
            transition(s, p, inst, INSTANCE, "release", Move(now, actor=SWEEP_SPENDING,
                                                             reason=why[:500]))
            stopped.append(inst.id)
        else:
            note(s, now, inst.id, "flagged",
                 phrase("reported to the operator: the tenant is {reason}", reason=reason),
                 actor=SWEEP_SPENDING)
            flagged.append(inst.id)
    said = [phrase("Your account is suspended: {reason}.", reason=reason)]
    if stopped:
        said.append(phrase("Stopped: {instances}.", instances=", ".join(stopped)))
    if flagged:
        said.append(phrase("Reported to the operator: {instances}.",
                           instances=", ".join(flagged)))
    said.append(phrase("New orders are refused until you top up."))
    _notice(s, wallet.tenant_id, "suspended", listed(said, " "), now)
    if stopped:
        p.wake()


def _low_balance(s: Session, p: Records, wallet: Wallet, now: datetime) -> None:
    hours = p.settings.low_balance_hours
    if hours <= 0 or _available(wallet) < 0:
        return
    if wallet.low_balance_notice_at is not None and (
            now - wallet.low_balance_notice_at < timedelta(days=1)):
        return
    cost = hourly_cost(s, wallet.tenant_id)
    if cost > 0 and _available(wallet) < cost * Decimal(str(hours)):
        wallet.low_balance_notice_at = now
        left = _available(wallet) / cost
        _notice(s, wallet.tenant_id, "low_balance", phrase(
            "Your balance (¥{available:,.2f} with the credit limit) pays about {hours} more "
            "hours of your running containers (¥{cost:,.2f} an hour). Top up to keep them "
            "running.", available=_available(wallet), hours=f"{left:.0f}", cost=cost), now)


def _dun(s: Session, p: Records, wallet: Wallet, now: datetime) -> None:
    """Remind each unpaid invoice on its days; suspend orders past the last limit."""
    unpaid = list(s.scalars(select(Invoice).where(
        Invoice.tenant_id == wallet.tenant_id, Invoice.kind == "invoice",
        Invoice.payment_status == "unpaid").order_by(Invoice.finalized_at)))
    overdue = None
    for inv in unpaid:
        assert inv.finalized_at is not None
        age = now - inv.finalized_at
        sent = {d for d in (inv.dunning_sent or "").split(",") if d}
        due = [d for d in p.settings.dunning_reminder_days
               if age >= timedelta(days=d) and str(d) not in sent]
        if due:
            inv.dunning_sent = ",".join(sorted(sent | {str(d) for d in due}, key=int))
            limit = inv.finalized_at + timedelta(days=p.settings.dunning_suspend_days)
            _notice(s, wallet.tenant_id, "dunning", phrase(
                "Invoice {invoice} ({period}) has ¥{due:,.2f} unpaid of ¥{total:,.2f}. Pay it "
                "(top up your account) by {limit}, or new orders are refused.",
                invoice=inv.number, period=inv.period, due=inv.amount_due or 0,
                total=inv.total, limit=local_text(limit, p.settings.zone)), now)
        if age >= timedelta(days=p.settings.dunning_suspend_days) and overdue is None:
            overdue = inv
    if overdue is not None and wallet.suspended_at is None:
        wallet.suspended_at = now
        wallet.suspended_reason = (f"invoice {overdue.number} unpaid for more than "
                                   f"{p.settings.dunning_suspend_days} days")
        _notice(s, wallet.tenant_id, "suspended", phrase(
            "New orders are refused: {reason}. Running machines are not touched.",
            reason=wallet.suspended_reason), now)
    elif overdue is None and wallet.suspended_at is not None and (
            wallet.suspended_reason or "").startswith("invoice"):
        wallet.suspended_at, wallet.suspended_reason = None, None
        _notice(s, wallet.tenant_id, "restored",
                phrase("Your invoices are paid; orders are open again."), now)


def sweep_spending(p: Moves) -> int:
    """The periodic job: overdraft warnings and suspensions, low-balance warnings, dunning.
    Looks only at wallets that may need it; returns how many it changed."""
    now = p.clock.now()
    with p.db.read() as s:
        ids = set(s.scalars(select(Wallet.tenant_id).where(
            (Wallet.balance + Wallet.credit_limit < 0) | Wallet.overdrawn_since.is_not(None)
            | Wallet.suspended_at.is_not(None))))
        ids |= set(s.scalars(select(Invoice.tenant_id).where(
            Invoice.payment_status == "unpaid").distinct()))
        ids |= _low_on_money(s, p, now)
    changed = 0
    for tenant_id in sorted(ids):
        with p.db.write() as s:
            wallet = s.get(Wallet, tenant_id, with_for_update=True)
            if wallet is None:
                continue
            before = (wallet.overdrawn_since, wallet.suspended_at, wallet.low_balance_notice_at)
            check_overdraft(s, p, wallet, now)
            if (wallet.overdrawn_since is not None and wallet.suspended_at is None
                    and now >= wallet.overdrawn_since
                    + timedelta(hours=p.settings.overdraft_grace_hours)):
                _suspend_for_overdraft(s, p, wallet, now)
            _low_balance(s, p, wallet, now)
            _dun(s, p, wallet, now)
            changed += before != (wallet.overdrawn_since, wallet.suspended_at,
                                  wallet.low_balance_notice_at)
    return changed


def dunning(p: Records, actor: Principal) -> list[DunningView]:
    """Operator: tenants overdrawn, suspended or with unpaid invoices, and what is at stake."""
    actor.require_operator()
    now = p.clock.now()
    with p.db.read() as s:
        owed: dict[str, list[Invoice]] = defaultdict(list)
        for inv in s.scalars(select(Invoice).where(Invoice.payment_status == "unpaid")
                             .order_by(Invoice.finalized_at)):
            owed[inv.tenant_id].append(inv)
        wallets = list(s.scalars(select(Wallet).where(
            (Wallet.balance + Wallet.credit_limit < 0) | Wallet.overdrawn_since.is_not(None)
            | Wallet.suspended_at.is_not(None) | Wallet.tenant_id.in_(list(owed)))
            .order_by(Wallet.tenant_id)))
        out = []
        for w in wallets:
            tenant = s.get(Tenant, w.tenant_id)
            invs = owed.get(w.tenant_id, [])
            oldest = invs[0] if invs else None
            out.append(DunningView(
                tenant_id=w.tenant_id, tenant_name=tenant.name if tenant else "",
                balance=w.balance, credit_limit=w.credit_limit,
                owed_on_invoices=sum((i.amount_due or Decimal(0) for i in invs),
                                     Decimal("0.00")),
                unpaid_invoices=[i.number or i.id for i in invs],
                oldest_unpaid_days=(now - oldest.finalized_at).days
                if oldest is not None and oldest.finalized_at else None,
                overdrawn_since=w.overdrawn_since, suspended_at=w.suspended_at,
                suspended_reason=w.suspended_reason,
                running=[i.id for i in _running(s, w.tenant_id)]))
        return out
