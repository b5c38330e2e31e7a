"""Quotes, the prepaid wallet and its ledger, operator top-ups and payouts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import EVERY_USER, ORDERING, TENANT_USERS, Caller, access
from gpulease.api.deps import PAYMENT_REQUIRED, Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.money import (
    AddonChargeView,
    AddonRequest,
    AddonView,
    AutoRenewRequest,
    BudgetRequest,
    BudgetView,
    CreditLimitRequest,
    InstanceCostView,
    LeaseView,
    LedgerEntryView,
    PayoutRequest,
    QuoteRequest,
    QuoteView,
    ReleaseTermsView,
    RenewalQuoteView,
    RenewRequest,
    TopUpRequest,
    WalletView,
    WebhookRequest,
)
from gpulease.services.catalog import quotes
from gpulease.services.money import addons, budgets, leases, wallet
from gpulease.services.money import instance_cost as instance_cost_service
from gpulease.services.money.release_terms import release_terms as terms_of_release
from gpulease.services.platform import notify

router = APIRouter(tags=["money"])
TenantQuery = Annotated[str | None, Query(alias="tenant", description="operator: which tenant")]


@router.post("/quotes", response_model=QuoteView, openapi_extra=access(*EVERY_USER))
def quote(body: QuoteRequest, p: PlatformDep, actor: PrincipalDep) -> QuoteView:
    """The full fee list of a lease: server price, every add-on, VAT, early-termination
    terms, the regions offering the SKU, and optionally day-vs-month for a usage pattern."""
    return quotes.make_quote(p, body)


@router.get("/wallet", response_model=WalletView, openapi_extra=access(*EVERY_USER))
def show_wallet(p: PlatformDep, actor: PrincipalDep, tenant: TenantQuery = None) -> WalletView:
    return wallet.show_wallet(p, actor, tenant)


@router.get("/wallet/ledger", response_model=Page[LedgerEntryView],
            openapi_extra=access(*EVERY_USER))
def ledger(p: PlatformDep, actor: PrincipalDep, tenant: TenantQuery = None,
           limit: Limit = 50, offset: Offset = 0) -> Page[LedgerEntryView]:
    """Every movement, newest first; the amounts sum to the balance."""
    return wallet.ledger(p, actor, tenant, limit, offset)


@router.post("/tenants/{tenant_id}/top-ups", response_model=WalletView, status_code=201,
             openapi_extra=access(Caller.OPERATOR))
def top_up(tenant_id: str, body: TopUpRequest, p: PlatformDep, actor: PrincipalDep
           ) -> WalletView:
    """Operator: record money received, with its payment reference (unique per tenant)."""
    return wallet.top_up(p, actor, tenant_id, body.amount, body.reference)


@router.post("/tenants/{tenant_id}/payouts", response_model=WalletView, status_code=201,
             openapi_extra=access(Caller.OPERATOR))
def payout(tenant_id: str, body: PayoutRequest, p: PlatformDep, actor: PrincipalDep
           ) -> WalletView:
    """Operator: record wallet balance paid back to the tenant's original payment (at most
    the balance; the reference once per tenant). Ledger kind `payout`."""
    return wallet.payout(p, actor, tenant_id, body.amount, body.reference)


@router.get("/instances/{instance_id}/cost", response_model=InstanceCostView,
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_cost(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> InstanceCostView:
    """What an hour of the instance costs now, and what it cost so far."""
    return instance_cost_service.cost_of(p, actor, instance_id)


@router.get("/budget", response_model=BudgetView, openapi_extra=access(*TENANT_USERS))
def budget(p: PlatformDep, actor: PrincipalDep) -> BudgetView:
    """Your tenant's monthly budget, this month's spend against it and the levels told."""
    return budgets.show_budget(p, actor)


@router.put("/budget", response_model=BudgetView, openapi_extra=access(Caller.ADMIN))
def set_budget(body: BudgetRequest, p: PlatformDep, actor: PrincipalDep) -> BudgetView:
    """Set (or with null remove) the monthly budget: notices at 50, 80 and 100 %; orders
    and renewals by hand past it refused (409)."""
    return budgets.set_budget(p, actor, body.monthly_budget)


@router.put("/tenants/{tenant_id}/credit-limit", response_model=WalletView,
            openapi_extra=access(Caller.OPERATOR))
def credit_limit(tenant_id: str, body: CreditLimitRequest, p: PlatformDep,
                 actor: PrincipalDep) -> WalletView:
    return wallet.set_credit_limit(p, actor, tenant_id, body.credit_limit)


@router.get("/instances/{instance_id}/addons", response_model=Page[AddonView],
            openapi_extra=access(*EVERY_USER, owned=True))
def list_addons(instance_id: str, p: PlatformDep, actor: PrincipalDep, limit: Limit = 100,
                offset: Offset = 0) -> Page[AddonView]:
    """The lease's add-ons: each with its quantity, book price and since / until."""
    return Page[AddonView].of(addons.list_addons(p, actor, instance_id), limit, offset)


@router.put("/instances/{instance_id}/addons/{addon_id}", response_model=list[AddonView],
            responses=PAYMENT_REQUIRED, openapi_extra=access(*ORDERING, owned=True))
def set_addon(instance_id: str, addon_id: str, body: AddonRequest, p: PlatformDep,
              actor: PrincipalDep) -> list[AddonView]:
    """Take, raise, lower or (quantity 0) remove an add-on on a running lease. More is
    charged at once for the paid time left (pro rata in the current period); less takes
    effect when the paid periods end, without a refund."""
    return addons.set_addon(p, actor, instance_id, addon_id, body.quantity)


@router.post("/instances/{instance_id}/addons/{addon_id}/charge",
             response_model=AddonChargeView, openapi_extra=access(*ORDERING, owned=True))
def addon_charge(instance_id: str, addon_id: str, body: AddonRequest, p: PlatformDep,
                 actor: PrincipalDep) -> AddonChargeView:
    """What `PUT …/addons/{addon_id}` with this quantity would charge now; nothing changes
    (the CLI asks with it before it spends)."""
    return AddonChargeView(instance_id=instance_id, addon_id=addon_id,
                           quantity=body.quantity,
                           charge=addons.addon_charge(p, actor, instance_id, addon_id,
                                                      body.quantity))


@router.get("/instances/{instance_id}/lease", response_model=LeaseView,
            openapi_extra=access(*EVERY_USER, owned=True))
def lease(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> LeaseView:
    """The bare-metal term: from delivery to its end, the grace after it, auto-renew."""
    return leases.show_lease(p, actor, instance_id)


@router.post("/instances/{instance_id}/renew", response_model=LeaseView,
             responses=PAYMENT_REQUIRED, openapi_extra=access(*ORDERING, owned=True))
def renew(instance_id: str, body: RenewRequest, p: PlatformDep, actor: PrincipalDep
          ) -> LeaseView:
    """Extend by N periods (charged now; 402 when the balance is short). During grace it
    cancels the erase. `term` switches between day and month."""
    return leases.renew(p, actor, instance_id, body.periods, body.term)


@router.get("/instances/{instance_id}/renewal-quote", response_model=RenewalQuoteView,
            openapi_extra=access(*EVERY_USER, owned=True))
def renewal_quote(instance_id: str, p: PlatformDep, actor: PrincipalDep,
                  periods: Annotated[int, Query(ge=1, le=36)] = 1,
                  term: Annotated[str | None, Query(max_length=16)] = None
                  ) -> RenewalQuoteView:
    """What `renew` with the same periods and term would charge, and the lease's new end:
    to show before confirming (nothing is charged)."""
    return leases.renewal_quote(p, actor, instance_id, periods, term)


@router.get("/instances/{instance_id}/release-terms", response_model=ReleaseTermsView,
            openapi_extra=access(*EVERY_USER, owned=True))
def release_terms(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> ReleaseTermsView:
    """What releasing now would refund and keep, and what happens to the data: to show
    before confirming a release (nothing is changed). 409 once it is released."""
    return terms_of_release(p, actor, instance_id)


@router.put("/instances/{instance_id}/auto-renew", response_model=LeaseView,
            openapi_extra=access(*ORDERING, owned=True))
def auto_renew(instance_id: str, body: AutoRenewRequest, p: PlatformDep,
               actor: PrincipalDep) -> LeaseView:
    return leases.set_auto_renew(p, actor, instance_id, body.auto_renew)


@router.put("/webhook", openapi_extra=access(Caller.ADMIN))
def set_webhook(body: WebhookRequest, p: PlatformDep, actor: PrincipalDep) -> dict[str, str]:
    """Tenant admin: receive lease reminders as signed POSTs. The secret is shown once; each
    POST carries X-Gpulease-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "t." + body>."""
    return notify.set_webhook(p, actor, body.url)


@router.delete("/webhook", status_code=204, openapi_extra=access(Caller.ADMIN))
def remove_webhook(p: PlatformDep, actor: PrincipalDep) -> None:
    notify.remove_webhook(p, actor)
