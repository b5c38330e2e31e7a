"""SQLAlchemy 2 tables of the money side: wallets and the ledger, usage, invoices, leases
and their notices, tenants' webhooks. Money is Numeric; times timezone-aware UTC."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpulease.db.base import Base, UtcDateTime

MONEY = Numeric(14, 2)
QUANTITY = Numeric(18, 6)
UNIT_PRICE = Numeric(14, 6)


class Wallet(Base):
    """A tenant's prepaid balance. Moves only together with a ledger entry."""

    __tablename__ = "wallets"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    balance: Mapped[Decimal] = mapped_column(MONEY)
    credit_limit: Mapped[Decimal] = mapped_column(MONEY)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # Spending beyond balance + credit limit (services/money/spending.py): since when, and
    # whether the tenant is suspended (orders refused; containers stopped) and why.
    overdrawn_since: Mapped[datetime | None] = mapped_column(UtcDateTime())
    suspended_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    suspended_reason: Mapped[str | None] = mapped_column(String(500))
    low_balance_notice_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class LedgerEntry(Base):
    """Append-only: every movement of a wallet (topup, hold, hold_release, charge, refund,
    credit). Amounts are signed (money in is positive) and always sum to the balance."""

    __tablename__ = "ledger_entries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    kind: Mapped[str] = mapped_column(String(16))
    amount: Mapped[Decimal] = mapped_column(MONEY)
    balance_after: Mapped[Decimal] = mapped_column(MONEY)
    reference: Mapped[str | None] = mapped_column(String(200))
    # The reference as a phrase (domain/phrases.Phrase as JSON) when the platform wrote it,
    # for the reader's language; a payment's reference as people typed it has none.
    phrase: Mapped[str | None] = mapped_column(Text)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    created_by: Mapped[str | None] = mapped_column(String(32))
    # What an invoice line says about it: a label, the quantity, its unit and unit price
    # (metered usage), and when the service was rendered: the start of the metered piece,
    # so usage reported late belongs to the month it was used in (None: `at`).
    item: Mapped[str | None] = mapped_column(String(200))
    item_phrase: Mapped[str | None] = mapped_column(Text)  # the item as a phrase (JSON)
    quantity: Mapped[Decimal | None] = mapped_column(QUANTITY)
    unit: Mapped[str | None] = mapped_column(String(16))
    unit_price: Mapped[Decimal | None] = mapped_column(UNIT_PRICE)
    service_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The span of service an entry pays for (lease periods, a usage span): its revenue is
    # earned over it. (service_at says which month's invoice bills it.)
    service_from: Mapped[datetime | None] = mapped_column(UtcDateTime())
    service_until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The invoice (or credit note) that bills this entry: at most one, ever.
    invoice_id: Mapped[str | None] = mapped_column(ForeignKey("invoices.id"))

    __table_args__ = (Index("ix_ledger_entries_unbilled", "tenant_id", "invoice_id"),)


class UsageRecord(Base):
    """One metered quantity (container GPU-hours, egress GB, extra storage GB-days) under
    the reporter's idempotency key: the same key twice is ignored, never billed twice."""

    __tablename__ = "usage_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    key: Mapped[str] = mapped_column(String(128))
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(24))
    quantity: Mapped[Decimal] = mapped_column(QUANTITY)
    unit_price: Mapped[Decimal] = mapped_column(UNIT_PRICE)
    amount: Mapped[Decimal] = mapped_column(MONEY)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime] = mapped_column(UtcDateTime())
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())
    source: Mapped[str] = mapped_column(String(32))  # worker | api:<user>
    # charged | held (beyond what the instance could use: not charged, waits for an
    # operator) | rejected (never charged)
    status: Mapped[str] = mapped_column(String(16), default="charged",
                                        server_default="charged", index=True)
    held_reason: Mapped[str | None] = mapped_column(String(500))
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    decided_by: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (UniqueConstraint("tenant_id", "key", name="uq_usage_records_key"),)


class Invoice(Base):
    """A tenant's monthly invoice or a credit note correcting one. A draft is recomputed
    from the ledger until it is finalized; then it never changes."""

    __tablename__ = "invoices"
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # invoice | credit_note
    period: Mapped[str] = mapped_column(String(7), index=True)  # YYYY-MM
    status: Mapped[str] = mapped_column(String(8), index=True)  # draft | final
    number: Mapped[str | None] = mapped_column(String(24), unique=True)
    corrects_id: Mapped[str | None] = mapped_column(String(24))
    reason: Mapped[str | None] = mapped_column(Text)
    currency: Mapped[str] = mapped_column(String(3))
    vat_rate: Mapped[Decimal] = mapped_column(Numeric(6, 4))
    prices_include_vat: Mapped[bool] = mapped_column(Boolean)
    net: Mapped[Decimal] = mapped_column(MONEY)
    vat: Mapped[Decimal] = mapped_column(MONEY)
    total: Mapped[Decimal] = mapped_column(MONEY)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finalized_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    digest: Mapped[str | None] = mapped_column(String(64))  # sha256 of the final content
    # The buyer as the tenant's billing profile said when the invoice was finalized (JSON).
    buyer: Mapped[str | None] = mapped_column(Text)
    # Final invoices: paid while the wallet covers them; unpaid with what is due when the
    # tenant's balance went below zero (credit limit), settled oldest first by top-ups.
    payment_status: Mapped[str | None] = mapped_column(String(8), index=True)
    amount_due: Mapped[Decimal | None] = mapped_column(MONEY)
    paid_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    dunning_sent: Mapped[str | None] = mapped_column(String(60))  # "0,7": reminders sent

    # One monthly invoice per tenant and period (credit notes are not limited).
    __table_args__ = (Index("uq_invoices_tenant_period", "tenant_id", "period", unique=True,
                            sqlite_where=text("kind = 'invoice'"),
                            postgresql_where=text("kind = 'invoice'")),)


class InvoiceLine(Base):
    __tablename__ = "invoice_lines"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    invoice_id: Mapped[str] = mapped_column(ForeignKey("invoices.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    instance_id: Mapped[str | None] = mapped_column(String(32))
    description: Mapped[str] = mapped_column(String(200))
    # its entries' item as a phrase (JSON), for the Chinese beside it on the PDF
    description_phrase: Mapped[str | None] = mapped_column(Text)
    quantity: Mapped[Decimal | None] = mapped_column(QUANTITY)
    unit: Mapped[str | None] = mapped_column(String(16))
    unit_price: Mapped[Decimal | None] = mapped_column(UNIT_PRICE)
    service_from: Mapped[datetime | None] = mapped_column(UtcDateTime())
    service_to: Mapped[datetime | None] = mapped_column(UtcDateTime())
    entries: Mapped[int] = mapped_column(Integer)  # ledger entries billed by this line
    net: Mapped[Decimal] = mapped_column(MONEY)
    vat: Mapped[Decimal] = mapped_column(MONEY)
    gross: Mapped[Decimal] = mapped_column(MONEY)


class InvoiceRun(Base):
    """The worker's record of each month's automatic run: drafted, then finalized."""

    __tablename__ = "invoice_runs"
    period: Mapped[str] = mapped_column(String(7), primary_key=True)
    drafted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finalized_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    invoices: Mapped[int] = mapped_column(Integer, default=0)


class InvoiceSequence(Base):
    """Gapless numbers per series and year (GL2026-000001, CN2026-000001)."""

    __tablename__ = "invoice_sequences"
    series: Mapped[str] = mapped_column(String(8), primary_key=True)
    last: Mapped[int] = mapped_column(Integer)


class Lease(Base):
    """A bare-metal instance's term: from delivery to ends_at (the end of its last period,
    lease_periods), then grace, then erase. `term` and `unit_price` are the base term the
    instance was ordered for and the price its order held: what auto-renew takes."""

    __tablename__ = "leases"
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), unique=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    term: Mapped[str] = mapped_column(String(8))
    unit_price: Mapped[Decimal] = mapped_column(MONEY)  # fixed at the start; kept on renewal
    periods: Mapped[int] = mapped_column(Integer)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    grace_until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    status: Mapped[str] = mapped_column(String(16), index=True)  # active | grace | ended
    auto_renew: Mapped[bool] = mapped_column(Boolean)
    reminders_sent: Mapped[str] = mapped_column(String(100))  # "7d,3d,1d,expiry"
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class BillingProfile(Base):
    """What a tenant's invoices print about the buyer (domain/billing/profile.py)."""

    __tablename__ = "billing_profiles"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    title: Mapped[str] = mapped_column(String(200))
    tax_id: Mapped[str] = mapped_column(String(20))
    address: Mapped[str] = mapped_column(String(200))
    phone: Mapped[str] = mapped_column(String(40))
    bank: Mapped[str] = mapped_column(String(100))
    bank_account: Mapped[str] = mapped_column(String(40))
    invoice_type: Mapped[str] = mapped_column(String(8))
    email: Mapped[str] = mapped_column(String(254))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_by: Mapped[str | None] = mapped_column(String(64))


class LeasePeriod(Base):
    """One paid period of a lease, with its own term, price and dates (domain/billing/leases.py:
    Period). An early end refunds the periods not begun and marks them refunded."""

    __tablename__ = "lease_periods"
    __table_args__ = (UniqueConstraint("lease_id", "seq"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    term: Mapped[str] = mapped_column(String(8))
    price: Mapped[Decimal] = mapped_column(MONEY)  # what this period cost
    anchor_at: Mapped[datetime] = mapped_column(UtcDateTime())  # its run's first start
    run_index: Mapped[int] = mapped_column(Integer)  # 1: the anchor's own period
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime())
    refunded_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class InstanceAddon(Base):
    """A periodic add-on on a leased instance (bandwidth, storage, support) from `since`
    until `until` (open: still on), at the book price of when it was chosen. A change is a
    new row: the old one ends when the change takes effect."""

    __tablename__ = "instance_addons"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    addon_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    unit: Mapped[str] = mapped_column(String(16))
    quantity: Mapped[Decimal] = mapped_column(Numeric(15, 3))
    unit_price: Mapped[Decimal] = mapped_column(Numeric(14, 4))  # the book's, VAT as written
    since: Mapped[datetime] = mapped_column(UtcDateTime())
    until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_by: Mapped[str | None] = mapped_column(String(64))


class LeaseNotice(Base):
    """The outbox of what a tenant is told: lease reminders (7, 3, 1 days before, at expiry,
    at erase) and money notices (low balance, overdrawn, suspended, dunning), which name no
    lease."""

    __tablename__ = "lease_notices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str | None] = mapped_column(ForeignKey("leases.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    # The text as a phrase (domain/phrases.Phrase as JSON: template and values), so that
    # each reader's e-mail says it in their language; `text` is the English.
    phrase: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # Each channel is marked on success: a failed webhook is retried without mailing twice.
    email_sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    webhook_sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)


class TenantWebhook(Base):
    """Where a tenant receives signed event notifications (HMAC-SHA256 with its secret)."""

    __tablename__ = "tenant_webhooks"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    url: Mapped[str] = mapped_column(String(500))
    secret_enc: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class SlaClaim(Base):
    """An SLA credit a tenant may be owed, with its evidence. Evidence the tenant controls
    (telemetry and acceptance reports from the rented host's own agent) waits for an
    operator's decision; platform-side evidence (the stand-in agent's run) is decided at
    once. A confirmed claim posts its credit, capped per lease period."""

    __tablename__ = "sla_claims"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # outage | acceptance
    evidence: Mapped[str] = mapped_column(String(200))  # "alert 12", "acceptance report …"
    item: Mapped[str] = mapped_column(String(200), unique=True)  # the ledger item, once
    text: Mapped[str] = mapped_column(String(500))
    text_phrase: Mapped[str | None] = mapped_column(Text)  # the text as a phrase (JSON)
    item_phrase: Mapped[str | None] = mapped_column(Text)  # the item as a phrase (JSON)
    amount: Mapped[Decimal] = mapped_column(MONEY)  # as the rule computes it
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    decision: Mapped[str | None] = mapped_column(String(16), index=True)  # confirmed | rejected
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    decided_by: Mapped[str | None] = mapped_column(String(64))
    note: Mapped[str | None] = mapped_column(String(500))
    credited: Mapped[Decimal | None] = mapped_column(MONEY)  # after the period's cap
    # the lease period the evidence falls in: its cap counts this claim, whenever confirmed
    period_start: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # an outage's server, GPU (-1: the whole server) and span: overlapping claims merge
    node_id: Mapped[str | None] = mapped_column(String(32))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    outage_from: Mapped[datetime | None] = mapped_column(UtcDateTime())
    outage_to: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Budget(Base):
    """A tenant's monthly spending budget, set by its admin: notices at 50, 80 and 100 %
    of the month's spend, and past it no new order or renewal."""

    __tablename__ = "budgets"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    monthly: Mapped[Decimal] = mapped_column(MONEY)
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UtcDateTime())


class BudgetNotice(Base):
    """A budget level (50, 80, 100) the tenant was told it reached in a month."""

    __tablename__ = "budget_notices"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    period: Mapped[str] = mapped_column(String(7), primary_key=True)
    level: Mapped[int] = mapped_column(Integer, primary_key=True)
    sent_at: Mapped[datetime] = mapped_column(UtcDateTime())
