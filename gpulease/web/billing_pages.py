"""The operator's money in the console. Invoices: every tenant's for a month, and the run
that drafts (or refreshes) and finalizes them. Prices: the catalog the platform prices
from (its version and who published it), each offer's price today and the changes
announced with their effective dates, and the catalog's TOML to edit and publish (checked
first; an error is said in one line and nothing changes)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import HTMLResponse

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError
from gpulease.platform import Platform
from gpulease.services.catalog import offers as catalog
from gpulease.services.catalog import versions as catalog_versions
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.web import i18n
from gpulease.web.pages import SameOrigin, Who, _, page, page_context, said

router = APIRouter(prefix="/console", include_in_schema=False,
                   dependencies=[Depends(page_context)])
OPERATOR = access(Caller.OPERATOR)
Period = Annotated[str | None, Query(max_length=7)]


def _invoices(p: Platform, who: Principal, period: str | None, status: int = 200,
              **extra: Any) -> HTMLResponse:
    listed = invoices.list_invoices(p, who, invoices.InvoiceFilter(period=period or None),
                                    limit=200)
    return page("invoice_runs.html", status, who=who, invoices=listed.items,
                total=listed.total, period=period or "", **extra)


@router.get("/invoices", response_class=HTMLResponse, openapi_extra=OPERATOR)
def invoices_page(p: PlatformDep, who: Who, period: Period = None) -> HTMLResponse:
    try:
        who.require_operator()
        return _invoices(p, who, period)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


@router.post("/invoices/run", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def run_invoices(p: PlatformDep, who: Who, period: Annotated[str, Form(max_length=7)],
                 finalize: Annotated[bool, Form()] = False) -> HTMLResponse:
    try:
        who.require_operator()
        ran = invoice_run.run_invoices(p, who, period.strip(), finalize)
    except DomainError as exc:
        try:
            return _invoices(p, who, None, exc.status, error=said(exc))
        except DomainError:
            return page("base.html", exc.status, who=who, error=said(exc))
    return _invoices(p, who, ran.period, ran=ran)


def _prices(p: Platform, who: Principal, status: int = 200, text: str | None = None,
            **extra: Any) -> HTMLResponse:
    return page("prices.html", status, who=who, catalog=catalog.catalog_view(p),
                version=catalog_versions.current(p),
                text=text if text is not None else catalog_versions.current_text(p, who),
                **extra)


@router.get("/prices", response_class=HTMLResponse, openapi_extra=OPERATOR)
def prices_page(p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        who.require_operator()
        return _prices(p, who)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


@router.post("/prices", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def publish_prices(p: PlatformDep, who: Who,
                   text: Annotated[str, Form(max_length=2_000_000)]) -> HTMLResponse:
    try:
        who.require_operator()
        published = catalog_versions.publish(p, who, text.replace("\r\n", "\n"))
    except DomainError as exc:
        if exc.status == 403:
            return page("base.html", exc.status, who=who, error=said(exc))
        return _prices(p, who, exc.status, text=text, error=said(exc))
    return _prices(p, who, notice=i18n.gettext(_(
        "Published: version %(version)s prices every new order and renewal from now on; "
        "running leases keep their prices.")) % {"version": published.id})
