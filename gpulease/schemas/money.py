"""Request and answer models of the money side: wallet, ledger, quotes, leases, usage,
invoices and credit notes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from gpulease.domain.billing.money import Money
from gpulease.schemas.text import OneLine, PlainNumber


class WalletView(BaseModel):
    tenant_id: str
    balance: Money
    credit_limit: Money
    held: Money = Field(description="held by orders not yet delivered (part of the balance)")
    available: Money = Field(description="balance + credit limit: what the next order may hold")
    updated_at: datetime
    overdrawn_since: datetime | None = Field(
        None, description="metered usage passed balance + credit limit: top up before grace "
                          "ends")
    suspended_reason: str | None = Field(
        None, description="why new orders are refused (and containers were stopped)")


class LedgerEntryView(BaseModel):
    id: int
    at: datetime
    kind: str
    amount: Money
    balance_after: Money
    reference: str | None
    instance_id: str | None
    # The reference as a phrase (JSON), for the console to say in the reader's language.
    phrase: str | None = Field(default=None, exclude=True)


class TopUpRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: Annotated[Decimal, PlainNumber] = Field(gt=0, max_digits=14, decimal_places=2,
                            description="yuan, at most two decimals")
    reference: str = Field(max_length=200, description="the payment's reference")


class InstanceCostView(BaseModel):
    instance_id: str
    per_hour: Annotated[Decimal, PlainNumber] | None = Field(description="what an hour of it "
        "costs now: a container's GPU-hours, or the current lease period's price over its "
        "hours; null once released")
    spent: Annotated[Decimal, PlainNumber] = Field(description="what it cost so far: charges, "
        "usage and the held first period, less refunds and credits")
    currency: str = "CNY"


class BudgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    monthly_budget: Annotated[Decimal, PlainNumber] | None = Field(
        ge=0, max_digits=14, decimal_places=2, description="the most to spend in a calendar "
        "month (yuan, as the price book shows prices); null: no budget")


class BudgetView(BaseModel):
    monthly_budget: Annotated[Decimal, PlainNumber] | None
    period: str = Field(description="this calendar month (the platform's time zone)")
    spent: Annotated[Decimal, PlainNumber] = Field(description="what this month's orders, "
                                                   "renewals, usage and refunds came to")
    spent_pct: float | None
    told: list[int] = Field(description="the levels (50, 80, 100 %) already told this month")


class CreditLimitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    credit_limit: Annotated[Decimal, PlainNumber] = Field(ge=0, max_digits=14, decimal_places=2)


class QuoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str = Field(max_length=100)
    region: str = Field(max_length=100)
    term: str = Field(default="month", max_length=16)
    count: int = Field(default=1, ge=1, le=1200,
                       description="periods of the term (e.g. 3 months)")
    servers: int = Field(default=1, ge=1, le=1024, description="servers (a cluster's nodes)")
    add: dict[Annotated[str, Field(max_length=64)],
              Annotated[Decimal, PlainNumber, Field(ge=0, max_digits=12,
                                                           decimal_places=3)]] = Field(
        default_factory=dict, max_length=20, description=(
            "add-ons and quantities: public-bandwidth (Mbps), extra-storage (GB), "
            "egress (GB), support-standard / support-premium (1)"))
    days_per_week: Annotated[Decimal | None, PlainNumber] = Field(
        default=None, ge=0, le=7, max_digits=4,
                                          decimal_places=2, description=(
        "optional usage pattern: also price it by the day and by the month"))


class QuoteLineView(BaseModel):
    item: str
    description: str
    unit: str
    quantity: Decimal
    unit_price: Money
    amount: Money
    example_price: bool
    phrase: str | None = Field(default=None, exclude=True)  # the description, for the console


class BreakEvenView(BaseModel):
    days_per_week: Decimal
    by_day_per_month: Money
    by_month: Money
    cheaper: str
    break_even_days_per_month: Decimal


class QuoteView(BaseModel):
    sku: str
    region: str
    term: str
    count: int
    servers: int
    lines: list[QuoteLineView]
    total: Money
    net: Money
    vat: Money
    vat_rate: Decimal
    prices_include_vat: bool
    early_termination: str
    regions: list[dict[str, str]] = Field(description="every region offering the SKU, "
                                                     "cheapest monthly price first")
    break_even: BreakEvenView | None = None
    notes: list[str]


class LeasePeriodView(BaseModel):
    seq: int
    term: str
    price: Money = Field(description="what this period cost")
    starts_at: datetime
    ends_at: datetime
    refunded: bool = Field(description="not begun when the lease ended early: refunded")


class LeaseView(BaseModel):
    instance_id: str
    term: str = Field(description="the base term (the order's): what auto-renew takes")
    unit_price: Money = Field(description="per base-term period, fixed when the lease started")
    periods: int
    starts_at: datetime = Field(description="delivery, not the order")
    ends_at: datetime
    grace_until: datetime | None
    status: str = Field(description="active | grace (expired, machine kept) | ended")
    auto_renew: bool
    grace_days: float
    reminders_sent: list[str]
    time_zone: str = Field(description="the calendar periods are counted on")
    schedule: list[LeasePeriodView] = Field(
        default_factory=list, description="every period: each renewal adds its own")


class RenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    periods: int = Field(default=1, ge=1, le=36)
    term: str | None = Field(default=None, max_length=16,
                             description="switch between day and month terms")


class RenewalLineView(BaseModel):
    item: str
    phrase: str | None = Field(default=None, exclude=True)  # the item, for the console
    quantity: int = Field(description="periods")
    unit_price: Money = Field(description="per period, VAT included")
    amount: Money


class RenewalQuoteView(BaseModel):
    """What a renewal would charge, before the tenant confirms it (nothing is written)."""

    instance_id: str
    periods: int
    term: str
    per_period: Money = Field(description="the servers and their add-ons, one period")
    total: Money = Field(description="what `renew` would charge now")
    lines: list[RenewalLineView]
    starts_at: datetime
    ends_at: datetime = Field(description="the lease's new end")
    cancels_erase: bool = Field(description="the lease is in grace: renewing keeps the machine")


class ReleaseTermsView(BaseModel):
    """What releasing an instance now would refund and keep (nothing is written)."""

    instance_id: str
    status: str
    case: Literal["undelivered", "hourly", "ended", "fault", "early_end"] = Field(
        description="undelivered: the hold comes back; hourly: a container, billed to the "
                    "release; ended: the lease is over; fault: the unused time back in full; "
                    "early_end: periods not begun back less the fee")
    refund: Money = Field(description="what comes back to the wallet at release")
    kept: Money = Field(description="what stays paid: the periods already begun")
    paid_until: datetime | None = Field(description="the end of the period that stays paid")
    periods_refunded: int
    fee_percent: Decimal = Field(description="the early-termination fee on periods not begun")
    ticket_id: str | None = Field(default=None, description="fault: the ticket that found it")
    summary: str
    data: str = Field(description="what happens to the disks and how to keep their data")


class AutoRenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auto_renew: bool


class WebhookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Annotated[str, OneLine] = Field(max_length=500)


class UsageIn(BaseModel):
    """One metered quantity reported by a metering source (network collector, storage)."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=128,
                     description="the reporter's idempotency key: the same key again is "
                                 "ignored")
    instance_id: str = Field(max_length=32)
    kind: Literal["gpu_hours", "egress_gb", "storage_gb_days"]
    quantity: Annotated[Decimal, PlainNumber] = Field(gt=0, max_digits=18, decimal_places=6)
    started_at: AwareDatetime
    ended_at: AwareDatetime


class UsageBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: list[UsageIn] = Field(min_length=1, max_length=1000)


class UsageView(BaseModel):
    id: int
    key: str
    status: Literal["charged", "held", "rejected"] = Field(
        description="held: beyond what the instance could physically use; not charged "
                    "unless an operator confirms it")
    held_reason: str | None = None
    instance_id: str | None
    kind: str
    quantity: Decimal
    unit: str
    unit_price: Decimal
    amount: Money
    started_at: datetime
    ended_at: datetime
    recorded_at: datetime
    source: str
    duplicate: bool = Field(False, description="true: this key was recorded before; ignored")


class RevenueLineView(BaseModel):
    period: str = Field(description="YYYY-MM on the platform's calendar")
    net: Money = Field(description="earned in that month (VAT excluded)")


class InvoiceLineView(BaseModel):
    seq: int
    kind: str
    instance_id: str | None
    description: str
    # the description as a phrase (JSON): the PDF prints the Chinese beside the English
    description_phrase: str | None = Field(default=None, exclude=True)
    quantity: Decimal | None
    unit: str | None
    unit_price: Decimal | None
    service_from: datetime | None
    service_to: datetime | None
    entries: int
    net: Money
    vat: Money
    gross: Money
    revenue: list[RevenueLineView] = Field(
        default_factory=list,
        description="the line's net earned month by month over its service period")


class BillingProfileIn(BaseModel):
    """The buyer on a tenant's invoices. `special` (专票) needs every field but `email`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    title: Annotated[str, OneLine] = Field(min_length=1, max_length=200,
                                           description="发票抬头: the buyer's name")
    tax_id: str = Field("", max_length=20, pattern=r"^[0-9A-Za-z]*$",
                        description="纳税人识别号 (unified social credit code)")
    address: Annotated[str, OneLine] = Field("", max_length=200,
                                             description="registered address")
    phone: Annotated[str, OneLine] = Field("", max_length=40)
    bank: Annotated[str, OneLine] = Field("", max_length=100, description="开户行")
    bank_account: Annotated[str, OneLine] = Field("", max_length=40, description="账号")
    invoice_type: Literal["normal", "special"] = Field(
        "normal", description="normal: 增值税普通发票; special: 增值税专用发票")
    email: Annotated[str, OneLine] = Field("", max_length=254,
                                           description="where the fapiao is sent")


class BillingProfileView(BillingProfileIn):
    model_config = ConfigDict(extra="ignore")
    tenant_id: str | None = None
    updated_at: datetime | None = None


class InvoiceView(BaseModel):
    id: str
    tenant_id: str
    tenant_name: str
    kind: Literal["invoice", "credit_note"]
    period: str
    status: Literal["draft", "final"]
    number: str | None
    corrects: str | None = Field(None, description="credit note: the invoice it corrects")
    reason: str | None
    currency: str
    vat_rate: Decimal
    prices_include_vat: bool
    net: Money
    vat: Money
    total: Money
    credited: Money = Field(description="invoice: the sum of credit notes against it")
    created_at: datetime
    finalized_at: datetime | None
    digest: str | None
    buyer: BillingProfileView | None = Field(
        None, description="the tenant's billing profile as it was when finalized")
    payment_status: Literal["paid", "unpaid"] | None = Field(
        None, description="final invoices: unpaid while the wallet is below zero")
    amount_due: Money | None = None
    paid_at: datetime | None = None
    lines: list[InvoiceLineView] = []


class InvoiceRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    period: str = Field(description="the month to invoice, YYYY-MM")
    finalize: bool = False


class InvoiceRunView(BaseModel):
    period: str
    drafted: int
    finalized: int
    tenants: int
    seconds: float


class PayoutRequest(BaseModel):
    """Operator: wallet balance paid back to the tenant's original payment."""

    model_config = ConfigDict(extra="forbid")
    amount: Annotated[Decimal, PlainNumber] = Field(gt=0, max_digits=14, decimal_places=2)
    reference: str = Field(min_length=1, max_length=200,
                           description="the bank transfer's or refund's reference")


class AddonView(BaseModel):
    addon: str
    name: str
    unit: str
    quantity: Decimal
    unit_price: Decimal = Field(description="the book price when chosen, per unit")
    since: datetime
    until: datetime | None = Field(description="open: still on")


class AddonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quantity: Annotated[Decimal, PlainNumber] = Field(ge=0, max_digits=12, decimal_places=3,
                              description="0 removes it (from the end of the paid periods)")


class OrderReviewView(BaseModel):
    """What an order would hold, checked as the order would be (nothing is written)."""

    hold: Money = Field(description="held from the wallet when the order is placed: the "
                                    "first period (bare metal, with its add-ons) or hour")
    available: Money = Field(description="what the wallet may hold now")
    covered: bool = Field(description="whether the wallet covers the hold")


class AddonChargeView(BaseModel):
    """What setting an add-on to a quantity would charge now (nothing is written)."""

    instance_id: str
    addon_id: str
    quantity: Decimal
    charge: Money = Field(description="charged now for the paid time left; 0 for less, which "
                                      "takes effect when the paid periods end")


class DunningView(BaseModel):
    tenant_id: str
    tenant_name: str
    balance: Money
    credit_limit: Money
    owed_on_invoices: Money
    unpaid_invoices: list[str]
    oldest_unpaid_days: int | None
    overdrawn_since: datetime | None = Field(description="spending passed balance + credit")
    suspended_at: datetime | None = Field(description="orders refused; containers stopped "
                                                      "when overdrawn")
    suspended_reason: str | None
    running: list[str] = Field(description="the tenant's running instances")


class RevenueView(BaseModel):
    start: str
    end: str
    months: list[RevenueLineView]
    total: Money


class CreditNoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500)
    amount: Annotated[Decimal | None, PlainNumber] = Field(
        None, gt=0, max_digits=14, decimal_places=2,
                                   description="yuan incl. VAT; omit to credit the whole "
                                               "remaining total")


class SlaClaimView(BaseModel):
    id: str
    instance_id: str
    tenant_id: str
    kind: str = Field(description="outage | acceptance")
    evidence: str = Field(description="what the claim rests on (an alert, a report)")
    text: str
    amount: Money = Field(description="the credit the rule computes, CNY")
    created_at: datetime
    decision: str | None = Field(description="null while open; confirmed | rejected")
    decided_at: datetime | None
    decided_by: str | None
    note: str | None
    credited: Money | None = Field(description="what was posted (after the period's cap)")


class SlaDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(default=None, max_length=500,
                             description="what the evidence on the platform's side showed")
