"""Metered usage and invoices: reported usage under idempotency keys, monthly invoices
(JSON, CSV, PDF), the operator's invoice run and credit notes."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from gpulease.api.access import EVERY_USER, Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.money import (
    BillingProfileIn,
    BillingProfileView,
    CreditNoteRequest,
    DunningView,
    InvoiceRunRequest,
    InvoiceRunView,
    InvoiceView,
    RevenueView,
    SlaClaimView,
    SlaDecision,
    UsageBatch,
    UsageView,
)
from gpulease.services.money import billing_profiles, metering, sla, spending
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.invoices.documents import render_csv, render_export_csv, render_pdf

router = APIRouter(tags=["billing"])
TenantQuery = Annotated[str | None, Query(alias="tenant", description="operator: which tenant")]


@router.post("/usage", response_model=list[UsageView],
             openapi_extra=access(Caller.METER, Caller.OPERATOR))
def report_usage(body: UsageBatch, p: PlatformDep, actor: PrincipalDep) -> list[UsageView]:
    """Operator (a metering source): record usage, all records or none. A key recorded
    before is answered with `duplicate: true` and billed nothing; the same key with other
    content is 409."""
    return metering.report_usage(p, actor, body.records)


@router.get("/usage/held", response_model=Page[UsageView],
            openapi_extra=access(Caller.OPERATOR))
def held_usage(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
               ) -> Page[UsageView]:
    """Operator: usage beyond what its instance could physically use, waiting for review
    (not charged); oldest first."""
    return metering.held_usage(p, actor, limit, offset)


@router.post("/usage/{record_id}/charge", response_model=UsageView,
             openapi_extra=access(Caller.OPERATOR))
def charge_usage(record_id: Annotated[int, Path(ge=1, le=2**31 - 1)], p: PlatformDep,
                 actor: PrincipalDep) -> UsageView:
    """Operator: the held record was real after all; charge it now."""
    return metering.decide_usage(p, actor, record_id, charge=True)


@router.post("/usage/{record_id}/reject", response_model=UsageView,
             openapi_extra=access(Caller.OPERATOR))
def reject_usage(record_id: Annotated[int, Path(ge=1, le=2**31 - 1)], p: PlatformDep,
                 actor: PrincipalDep) -> UsageView:
    """Operator: the held record is not charged, ever."""
    return metering.decide_usage(p, actor, record_id, charge=False)


@router.get("/usage", response_model=Page[UsageView], openapi_extra=access(*EVERY_USER))
def list_usage(p: PlatformDep, actor: PrincipalDep, instance: str | None = None,
               tenant: TenantQuery = None, limit: Limit = 100, offset: Offset = 0
               ) -> Page[UsageView]:
    return metering.list_usage(p, actor, instance, tenant, limit, offset)


@router.get("/invoices", response_model=Page[InvoiceView], openapi_extra=access(*EVERY_USER))
def list_invoices(p: PlatformDep, actor: PrincipalDep, tenant: TenantQuery = None,
                  period: str | None = None, status: str | None = None, limit: Limit = 50,
                  offset: Offset = 0) -> Page[InvoiceView]:
    return invoices.list_invoices(p, actor, invoices.InvoiceFilter(tenant, period, status),
                                  limit, offset)


@router.get("/invoices/export", response_model=Page[InvoiceView],
            responses={200: {"content": {"text/csv": {}}}},
            openapi_extra=access(Caller.OPERATOR))
def export_invoices(period: Annotated[str, Query(description="YYYY-MM")], p: PlatformDep,
                    actor: PrincipalDep, format: Literal["json", "csv"] = "json",
                    limit: Limit = 500, offset: Offset = 0) -> Page[InvoiceView] | Response:
    """Operator: a month's final invoices and credit notes with their lines and buyers,
    for the fapiao system: JSON a page at a time, or `?format=csv`, the whole month in one
    file, one row per line."""
    rows = invoices.export_period(p, actor, period)
    if format == "csv":
        return Response(render_export_csv(rows), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition":
                                 f'attachment; filename="invoices-{period}.csv"'})
    return Page[InvoiceView].of(rows, limit, offset)


@router.get("/revenue", response_model=RevenueView, openapi_extra=access(Caller.OPERATOR))
def revenue(start: Annotated[str, Query(description="first month, YYYY-MM")],
            end: Annotated[str, Query(description="last month, YYYY-MM")], p: PlatformDep,
            actor: PrincipalDep) -> RevenueView:
    """Operator: invoiced net earned month by month over each line's service period (a
    year lease is earned month by month)."""
    return invoices.revenue(p, actor, start, end)


@router.get("/dunning", response_model=Page[DunningView], openapi_extra=access(Caller.OPERATOR))
def dunning(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
            ) -> Page[DunningView]:
    """Operator: tenants overdrawn, suspended or with unpaid invoices: balance, what the
    invoices owe and since when, and their running instances (bare metal is flagged here,
    not stopped)."""
    return Page[DunningView].of(spending.dunning(p, actor), limit, offset)


@router.get("/billing-profile", response_model=BillingProfileView,
            openapi_extra=access(*EVERY_USER))
def billing_profile(p: PlatformDep, actor: PrincipalDep, tenant: TenantQuery = None
                    ) -> BillingProfileView:
    """The buyer printed on the tenant's invoices (404 until one is set)."""
    return billing_profiles.show_profile(p, actor, tenant)


@router.put("/billing-profile", response_model=BillingProfileView,
            openapi_extra=access(Caller.ADMIN, Caller.OPERATOR))
def set_billing_profile(body: BillingProfileIn, p: PlatformDep, actor: PrincipalDep,
                        tenant: TenantQuery = None) -> BillingProfileView:
    """Tenant admin (or an operator with `?tenant=`): the invoice title, taxpayer id,
    address, bank and 普票/专票; a special invoice needs them all. Invoices finalized from
    now on print it; those issued before keep what they printed."""
    return billing_profiles.set_profile(p, actor, body, tenant)


@router.get("/invoices/{invoice_id}", response_model=InvoiceView,
            responses={200: {"content": {"text/csv": {}, "application/pdf": {}}}},
            openapi_extra=access(*EVERY_USER, owned=True))
def show_invoice(invoice_id: str, p: PlatformDep, actor: PrincipalDep,
                 format: Literal["json", "csv", "pdf"] = "json") -> InvoiceView | Response:
    """By id or number. `?format=csv` or `?format=pdf` for the document."""
    inv = invoices.show_invoice(p, actor, invoice_id)
    name = inv.number or inv.id
    if format == "csv":
        return Response(render_csv(inv), media_type="text/csv; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{name}.csv"'})
    if format == "pdf":
        pdf = render_pdf(inv, p.settings.invoice_issuer, p.settings.invoice_issuer_tax_id)
        return Response(pdf, media_type="application/pdf", headers={
            "Content-Disposition": f'attachment; filename="{name}.pdf"'})
    return inv


@router.post("/invoices/run", response_model=InvoiceRunView, openapi_extra=access(Caller.OPERATOR))
def run(body: InvoiceRunRequest, p: PlatformDep, actor: PrincipalDep) -> InvoiceRunView:
    """Operator: draft (or refresh) every tenant's invoice of a month; `finalize` seals
    them (only once the month has ended). The worker does this by itself each month."""
    return invoice_run.run_invoices(p, actor, body.period, body.finalize)


@router.post("/invoices/{invoice_id}/finalize", response_model=InvoiceView,
             openapi_extra=access(Caller.OPERATOR))
def finalize(invoice_id: str, p: PlatformDep, actor: PrincipalDep) -> InvoiceView:
    return invoice_run.finalize_invoice(p, actor, invoice_id)


@router.post("/invoices/{invoice_id}/credit-notes", response_model=InvoiceView,
             status_code=201, openapi_extra=access(Caller.OPERATOR))
def credit_note(invoice_id: str, body: CreditNoteRequest, p: PlatformDep,
                actor: PrincipalDep) -> InvoiceView:
    """Operator: correct a final invoice; the amount goes back to the tenant's wallet."""
    return invoice_run.credit_note(p, actor, invoice_id, body.reason, body.amount)


@router.get("/sla-claims", response_model=Page[SlaClaimView], openapi_extra=access(*EVERY_USER))
def sla_claims(p: PlatformDep, actor: PrincipalDep, limit: Limit = 50, offset: Offset = 0,
               status: Literal["open", "confirmed", "rejected"] | None = None
               ) -> Page[SlaClaimView]:
    """SLA credits claimed for outages and failed acceptance, with their evidence: a tenant's
    own, an operator's all. Claims resting on the rented host's own agent stay open until an
    operator decides."""
    return sla.list_claims(p, actor, status, limit, offset)


@router.post("/sla-claims/{claim_id}/confirm", response_model=SlaClaimView,
             openapi_extra=access(Caller.OPERATOR))
def confirm_claim(claim_id: str, p: PlatformDep, actor: PrincipalDep,
                  body: SlaDecision | None = None) -> SlaClaimView:
    """Operator: the platform's own evidence (BMC log, a run from the cleaning ramdisk)
    bears the claim out; its credit is posted, capped per lease period."""
    return sla.decide(p, actor, claim_id, True, body.note if body else None)


@router.post("/sla-claims/{claim_id}/reject", response_model=SlaClaimView,
             openapi_extra=access(Caller.OPERATOR))
def reject_claim(claim_id: str, p: PlatformDep, actor: PrincipalDep,
                 body: SlaDecision | None = None) -> SlaClaimView:
    """Operator: the claim is not borne out; nothing is credited."""
    return sla.decide(p, actor, claim_id, False, body.note if body else None)
