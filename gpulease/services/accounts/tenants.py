"""Tenants as the operator manages them: listed with what they rent and hold, suspended
(new orders refused, machines kept), reinstated, and closed once nothing is rented,
unbilled or owed either way; closing disables its users and ends their tokens."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import exists, func, or_, select, update
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Budget, Invoice, LedgerEntry, Wallet
from gpulease.db.tables import ApiToken, GpuQuota, Instance, Tenant, User
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.invoicing import BILLABLE_KINDS
from gpulease.domain.billing.money import to_fen
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.domain.states import TENANT, InstanceStatus, InvoiceStatus, TenantStatus
from gpulease.lifecycle.history import by
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Moves, Records
from gpulease.schemas import Page, TenantSummary
from gpulease.services.money.payments import owed_on_invoices

LIVE = Instance.status.not_in((InstanceStatus.RELEASED.value, InstanceStatus.FAILED.value))


@dataclass(frozen=True)
class OrderLimits:
    """What else an order must respect, read with the tenant's status: whether it has GPU
    quotas (services/accounts/quotas.py) and its monthly budget (services/money/budgets.py);
    each checked only when there is one."""

    gpu_quotas: bool = False
    budget: Decimal | None = None


def refuse_orders_unless_active(s: Session, tenant_id: str) -> OrderLimits:
    """A suspended or closed tenant may not order (its machines are kept). Returns the
    limits its orders are checked against."""
    quotas = exists().where(GpuQuota.tenant_id == Tenant.id)  # in the same statement
    row = s.execute(select(Tenant.status, Tenant.status_reason, quotas.label("gpu_quotas"),
                           Budget.monthly).outerjoin(Budget, Budget.tenant_id == Tenant.id)
                    .where(Tenant.id == tenant_id)).one_or_none()
    if row is not None and row.status != TenantStatus.ACTIVE.value:
        raise Forbidden("New orders are refused: your account is {status}{reason}. Your "
                        "running machines are kept; contact the provider.",
                        status=phrase(row.status),
                        reason=f" ({row.status_reason})" if row.status_reason else "")
    if row is None:
        return OrderLimits()
    return OrderLimits(bool(row.gpu_quotas),
                       Decimal(row.monthly) if row.monthly is not None else None)


def list_tenants(p: Records, actor: Principal, status: str | None = None, limit: int = 100,
                 offset: int = 0) -> Page[TenantSummary]:
    """A page of tenants with their users, live instances and balance (four statements)."""
    actor.require_operator()
    if status is not None and status not in {st.value for st in TenantStatus}:
        raise InvalidInput("status", "Unknown tenant status {status!r}.",
                           [st.value for st in TenantStatus], status=status)
    with p.db.read() as s:
        q = select(Tenant)
        if status:
            q = q.where(Tenant.status == status)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = list(s.scalars(q.order_by(Tenant.created_at, Tenant.id).limit(limit)
                              .offset(offset)))
        items = _summaries(s, rows)
    return Page(items=items, total=total, limit=limit, offset=offset)


def _summaries(s: Session, rows: list[Tenant]) -> list[TenantSummary]:
    """The rows with their users, live instances and balance (three statements)."""
    ids = [t.id for t in rows]
    users = {k: n for k, n in s.execute(
        select(User.tenant_id, func.count()).where(User.tenant_id.in_(ids),
                                                   User.removed_at.is_(None))
        .group_by(User.tenant_id))}
    live = {k: n for k, n in s.execute(
        select(Instance.tenant_id, func.count()).where(Instance.tenant_id.in_(ids), LIVE)
        .group_by(Instance.tenant_id))}
    balances = {k: b for k, b in s.execute(
        select(Wallet.tenant_id, Wallet.balance).where(Wallet.tenant_id.in_(ids)))}
    return [TenantSummary(
        id=t.id, name=t.name, status=t.status, status_reason=t.status_reason,
        created_at=t.created_at, users=users.get(t.id, 0), live_instances=live.get(t.id, 0),
        balance=to_fen(Decimal(str(balances.get(t.id, 0))))) for t in rows]


def _load(s: Session, tenant_id: str) -> Tenant:
    tenant = s.scalar(select(Tenant).where((Tenant.id == tenant_id) | (Tenant.name == tenant_id))
                      .with_for_update())
    if tenant is None:
        raise NotFound("No tenant {tenant_id}; `gpulease tenants` lists them.",
                       tenant_id=tenant_id)
    return tenant


def _summary(p: Records, tenant_id: str) -> TenantSummary:
    """One tenant as the list shows it, after a change."""
    with p.db.read() as s:
        tenant = s.get(Tenant, tenant_id)
        assert tenant is not None
        return _summaries(s, [tenant])[0]


def show_tenant(p: Records, actor: Principal, tenant_id: str) -> TenantSummary:
    """One tenant (by id or name) as the list shows it."""
    actor.require_operator()
    with p.db.read() as s:
        tenant = s.scalar(select(Tenant).where((Tenant.id == tenant_id)
                                               | (Tenant.name == tenant_id)))
        if tenant is None:
            raise NotFound("No tenant {tenant_id}; `gpulease tenants` lists them.",
                           tenant_id=tenant_id)
        return _summaries(s, [tenant])[0]


def suspend(p: Moves, actor: Principal, tenant_id: str, reason: str | None) -> TenantSummary:
    actor.require_operator()
    if not (reason or "").strip():
        raise InvalidInput("reason", "Say why the account is suspended (its users see it when "
                           "an order is refused).")
    with p.db.write() as s:
        tenant = _load(s, tenant_id)
        if tenant.status != TenantStatus.ACTIVE.value:
            raise Conflict("Tenant {tenant_name} is {tenant_status}.",
                           tenant_name=tenant.name, tenant_status=tenant.status)
        transition(s, p, tenant, TENANT, "suspend", Move(p.clock.now(), actor=by(actor),
                                                         reason=reason))
        found = tenant.id
    return _summary(p, found)


def reinstate(p: Moves, actor: Principal, tenant_id: str) -> TenantSummary:
    actor.require_operator()
    with p.db.write() as s:
        tenant = _load(s, tenant_id)
        if tenant.status != TenantStatus.SUSPENDED.value:
            raise Conflict("Tenant {tenant_name} is {tenant_status}, not suspended.",
                           tenant_name=tenant.name, tenant_status=tenant.status)
        transition(s, p, tenant, TENANT, "reinstate", Move(p.clock.now(), actor=by(actor)))
        found = tenant.id
    return _summary(p, found)


def _why_not_closable(s: Session, tenant_id: str) -> list[Phrase]:
    """Everything that keeps an account open, each with what to do."""
    why = []
    live = s.scalar(select(func.count()).select_from(Instance).where(
        Instance.tenant_id == tenant_id, LIVE)) or 0
    if live:
        why.append(phrase("{live} instances are not released yet (its users release them; "
                          "a suspended tenant still can)", live=live))
    unbilled = s.scalar(select(func.count()).select_from(LedgerEntry).where(
        LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind.in_(BILLABLE_KINDS),
        or_(LedgerEntry.invoice_id.is_(None),
            LedgerEntry.invoice_id.in_(select(Invoice.id).where(
                Invoice.status == InvoiceStatus.DRAFT.value)))
    )) or 0
    if unbilled:
        why.append(phrase("{unbilled} charges are on no final invoice yet (run and finalize "
                          "the month's invoices: `gpulease invoice-run YYYY-MM --finalize`)",
                          unbilled=unbilled))
    owed = owed_on_invoices(s, tenant_id)
    if owed > 0:
        why.append(phrase("¥{owed:,} is unpaid on final invoices (a top-up settles it)",
                          owed=owed))
    wallet = s.get(Wallet, tenant_id)
    if wallet is not None and owed == 0 and wallet.balance > 0:
        why.append(phrase("¥{balance:,} is left in the wallet (pay it back: `gpulease payout "
                          "TENANT AMOUNT --reference …`)", balance=wallet.balance))
    elif wallet is not None and owed == 0 and wallet.balance < 0:
        why.append(phrase("the wallet is ¥{short:,} short (a top-up settles it)",
                          short=-wallet.balance))
    return why


def close(p: Moves, actor: Principal, tenant_id: str, reason: str | None) -> TenantSummary:
    """Close an account nothing is rented, unbilled or owed on: its users are disabled and
    their tokens end; its instances, invoices, ledger and audit stay."""
    actor.require_operator()
    with p.db.write() as s:
        tenant = _load(s, tenant_id)
        if tenant.status == TenantStatus.CLOSED.value:
            raise Conflict("Tenant {tenant_name} is closed already.", tenant_name=tenant.name)
        why = _why_not_closable(s, tenant.id)
        if why:
            raise Conflict("Tenant {tenant} cannot be closed yet: {why}.", tenant=tenant.name,
                           why=listed(why))
        now = p.clock.now()
        users = select(User.id).where(User.tenant_id == tenant.id)
        s.execute(update(User).where(User.tenant_id == tenant.id, User.disabled_at.is_(None))
                  .values(disabled_at=now))
        s.execute(update(ApiToken).where(ApiToken.user_id.in_(users),
                                         ApiToken.revoked_at.is_(None))
                  .values(revoked_at=now))
        transition(s, p, tenant, TENANT, "close", Move(now, actor=by(actor),
                                                       reason=reason or "closed by operator"))
        found = tenant.id
    return _summary(p, found)
