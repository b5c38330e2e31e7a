"""The operator's tenants in the console: the list (status, users, live instances,
balance), a new tenant with its first admin (whose token is shown once), and one tenant's
page: its wallet, a top-up by payment reference (the same reference twice is refused),
its credit limit, suspension and reinstatement."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError, InvalidInput
from gpulease.platform import Platform
from gpulease.schemas import TenantCreate
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import tenants
from gpulease.services.money import wallet
from gpulease.web import i18n
from gpulease.web.pages import SameOrigin, Who, _, page, page_context, refusal, said

router = APIRouter(prefix="/console/tenants", include_in_schema=False,
                   dependencies=[Depends(page_context)])
OPERATOR = access(Caller.OPERATOR)
OWNED = access(Caller.OPERATOR, owned=True)
Text = Annotated[str, Form(max_length=200)]


def _amount(raw: str, field: str) -> Decimal:
    try:
        return Decimal(raw.strip().replace(",", ""))
    except InvalidOperation:
        raise InvalidInput(field, "{raw!r} is not an amount; write yuan like 50000 or "
                                  "1234.50.", raw=raw) from None


def _list(p: Platform, who: Principal, status: int = 200, **extra: Any) -> HTMLResponse:
    listed = tenants.list_tenants(p, who, status=extra.pop("filter", None), limit=200)
    return page("tenants.html", status, who=who, tenants=listed.items, total=listed.total,
                **extra)


def _detail(p: Platform, who: Principal, tenant_id: str, status: int = 200, **extra: Any
            ) -> HTMLResponse:
    summary = tenants.show_tenant(p, who, tenant_id)
    return page("tenant.html", status, who=who, tenant=summary,
                wallet=wallet.show_wallet(p, who, summary.id),
                ledger=wallet.ledger(p, who, tenant_id=summary.id, limit=20).items, **extra)


@router.get("", response_class=HTMLResponse, openapi_extra=OPERATOR)
def tenants_page(p: PlatformDep, who: Who,
                 status: Annotated[str | None, Query(max_length=16)] = None) -> HTMLResponse:
    try:
        who.require_operator()
        return _list(p, who, filter=status or None, shown_status=status or "")
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


@router.post("", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def create_tenant(p: PlatformDep, who: Who, name: Text, admin_email: Text,
                  admin_name: Text) -> HTMLResponse:
    try:
        who.require_operator()
        body = TenantCreate(name=name.strip(), admin_email=admin_email.strip(),
                            admin_name=admin_name.strip())
        made = accounts.create_tenant(p, body.name, accounts.Person(body.admin_email,
                                                                    body.admin_name), actor=who)
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        return _list(p, who, status, error=why)
    return _list(p, who, notice=i18n.gettext(_(
        "The tenant is created. Hand its admin this token now: it is not shown again.")),
        created=made)


@router.get("/{tenant_id}", response_class=HTMLResponse, openapi_extra=OWNED)
def tenant_page(tenant_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        who.require_operator()
        return _detail(p, who, tenant_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


def _act(p: Platform, who: Principal, tenant_id: str, act: Any, done: str) -> HTMLResponse:
    try:
        who.require_operator()
        act()
    except DomainError as exc:
        try:
            return _detail(p, who, tenant_id, exc.status, error=said(exc))
        except DomainError:
            return page("base.html", exc.status, who=who, error=said(exc))
    return _detail(p, who, tenant_id, notice=i18n.gettext(done))


@router.post("/{tenant_id}/top-up", dependencies=[SameOrigin], openapi_extra=OWNED)
def top_up(tenant_id: str, p: PlatformDep, who: Who, amount: Text, reference: Text
           ) -> HTMLResponse:
    return _act(p, who, tenant_id, lambda: wallet.top_up(
        p, who, tenant_id, _amount(amount, "amount"), reference.strip()),
        _("The top-up is booked."))


@router.post("/{tenant_id}/credit-limit", dependencies=[SameOrigin], openapi_extra=OWNED)
def credit_limit(tenant_id: str, p: PlatformDep, who: Who, credit_limit: Text
                 ) -> HTMLResponse:
    return _act(p, who, tenant_id, lambda: wallet.set_credit_limit(
        p, who, tenant_id, _amount(credit_limit, "credit_limit")),
        _("The credit limit is set."))


@router.post("/{tenant_id}/suspend", dependencies=[SameOrigin], openapi_extra=OWNED)
def suspend(tenant_id: str, p: PlatformDep, who: Who,
            reason: Annotated[str | None, Form(max_length=200)] = None) -> HTMLResponse:
    return _act(p, who, tenant_id, lambda: tenants.suspend(p, who, tenant_id, reason or None),
                _("The tenant is suspended: no new orders; its containers stop."))


@router.post("/{tenant_id}/reinstate", dependencies=[SameOrigin], openapi_extra=OWNED)
def reinstate(tenant_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    return _act(p, who, tenant_id, lambda: tenants.reinstate(p, who, tenant_id),
                _("The tenant is active again."))
