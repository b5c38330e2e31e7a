"""The console's pages where money moves, each shown before it moves: an order is reviewed
(the quote's lines, VAT, the total and the hold against the wallet) and then confirmed; a
release states what is refunded and what is kept, and asks again; a renewal shows its
charge and the new end; auto-renew is switched on the lease's own card."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from gpulease.api.access import ORDERING, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.catalog import images
from gpulease.services.catalog import offers as catalog
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import leases, wallet
from gpulease.services.money.release_terms import release_terms
from gpulease.services.orders import ordering as orders
from gpulease.services.orders import review
from gpulease.translations import N_
from gpulease.web.pages import (
    Once,
    SameOrigin,
    Who,
    new_once,
    once_key,
    page,
    page_context,
    refusal,
    said,
)

router = APIRouter(prefix="/console", include_in_schema=False,
                   dependencies=[Depends(page_context)])
# The add-ons an order form offers (those billed per period; egress and object storage
# are metered from use).
ORDER_ADDONS = ("public-bandwidth", "extra-storage")
SUPPORT = ("support-standard", "support-premium")
Text = Annotated[str | None, Form(max_length=100)]
QueryText = Annotated[str | None, Query(max_length=100)]


def catalog_page(p: Platform, who: Principal, status: int = 200, **extra: Any) -> HTMLResponse:
    return page("catalog.html", status, who=who, catalog=catalog.catalog_view(p), **extra)


@router.get("/order", response_class=HTMLResponse, openapi_extra=access(*ORDERING))
def order_form(p: PlatformDep, who: Who, request: Request, sku: QueryText = None,
               region: QueryText = None, offer: QueryText = None) -> HTMLResponse:
    """One offer's order form: the page's query carries the offer and, coming back from
    the review, what was typed."""
    try:
        who.require_order_rights()
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    form = {k: v for k, v in request.query_params.items() if k in FORM_FIELDS}
    return order_page(p, who, Pick(sku, region, offer), form)


FORM_FIELDS = ("kind", "nodes", "term", "image", "gpus", "name", "ssh_key", "bandwidth",
               "storage", "support")


@dataclass(frozen=True)
class Pick:
    """The offer an order page is for: a bare-metal SKU in a region, or a container offer."""

    sku: str | None
    region: str | None
    offer: str | None


def order_page(p: Platform, who: Principal, pick: Pick, form: dict[str, Any],
               status: int = 200, error: str | None = None) -> HTMLResponse:
    view = catalog.catalog_view(p)
    bare = next((o for o in view.offers if o.sku == pick.sku and o.region == pick.region),
                None)
    container = next((c for c in view.container_offers if c.id == pick.offer), None)
    if bare is None and container is None:
        return catalog_page(p, who, 404, error=(
            "There is no such offer in the catalog; pick one below."))
    book = p.price_book()
    if bare is not None:
        gpu = book.sku_by_id[bare.sku].gpu
    else:
        assert container is not None
        gpu = book.container_offer_by_id[container.id].gpu
    vendor = book.gpu_by_id[gpu].vendor
    addon_by_id = book.addon_by_id
    return page("order.html", status, who=who, offer=bare, container=container, form=form,
                error=error, vendor=vendor, images=images.list_images(p),
                last_keys=orders.last_ssh_keys(p, who),
                order_addons=[addon_by_id[a] for a in ORDER_ADDONS if a in addon_by_id],
                support=[addon_by_id[a] for a in SUPPORT if a in addon_by_id])


def _add_ons(bandwidth: str | None, storage: str | None, support: str | None
             ) -> dict[str, Decimal]:
    chosen: dict[str, Decimal] = {}
    for addon, raw in (("public-bandwidth", bandwidth), ("extra-storage", storage)):
        if raw and raw.strip() not in ("", "0"):
            try:
                chosen[addon] = Decimal(raw.strip())
            except InvalidOperation:
                chosen[addon] = Decimal(-1)  # refused by the order's own check, by name
    if support:
        chosen[support] = Decimal(1)
    return chosen


@router.post("/orders", dependencies=[SameOrigin], openapi_extra=access(*ORDERING))
def order(p: PlatformDep, who: Who, kind: Annotated[str, Form(max_length=16)],
          ssh_key: Annotated[str, Form(max_length=65536)], sku: Text = None,
          region: Text = None, term: Annotated[str | None, Form(max_length=16)] = None,
          offer: Text = None, gpus: Annotated[int | None, Form()] = None,
          nodes: Annotated[int, Form()] = 1, name: Text = None, image: Text = None,
          bandwidth: Annotated[str | None, Form(max_length=20)] = None,
          storage: Annotated[str | None, Form(max_length=20)] = None,
          support: Annotated[str | None, Form(max_length=32)] = None,
          confirmed: Annotated[bool, Form()] = False, once: Once = None) -> Response:
    """First the review (nothing held); the review's "Confirm and pay" posts the same
    fields again with `confirmed`, which places the order, once per review: the review
    carries a one-time key (`once`), so the back button, F5 or a second tab confirming the
    same review show the order placed, never a second one."""
    try:
        who.require_order_rights()
        req = OrderRequest(kind=kind, sku=sku or None, region=region or None, term=term or None,
                           offer=offer or None, gpus=gpus, nodes=nodes, name=name or None,
                           image=image or None, add=_add_ons(bandwidth, storage, support),
                           ssh_keys=[k for k in ssh_key.splitlines() if k.strip()])
        if not confirmed:
            return _review(p, who, req, ssh_key)
        view, _ = orders.place_order(p, who, req,
                                     idempotency_key=once_key(once))
    except (DomainError, ValidationError) as exc:
        typed = {"kind": kind, "nodes": nodes, "term": term, "image": image, "gpus": gpus,
                 "name": name, "ssh_key": ssh_key, "bandwidth": bandwidth,
                 "storage": storage, "support": support}
        status, why = refusal(exc)
        return order_page(p, who, Pick(sku, region, offer), typed, status, why)
    return RedirectResponse(f"/console/instances/{view.id}", status_code=303)


def _review(p: Platform, who: Principal, req: OrderRequest, ssh_key: str) -> HTMLResponse:
    """The order's price before anything is held: bare metal by the quote (the same total
    the order holds), a container by its first hour."""
    hold, quote = review.order_hold(p, req)
    money = wallet.show_wallet(p, who)
    if quote is None:  # a container: its first hour
        co = p.price_book().container_offer_by_id[req.offer or ""]
        lines = [{"item": f"{co.id} · {co.gpu}", "description": N_("per GPU-hour, billed each "
                  "hour while it runs"), "quantity": req.gpus or 1, "unit": "GPU-hour",
                  "unit_price": co.price_per_gpu_hour, "amount": hold}]
    else:
        lines = [line.model_dump() | {"phrase": line.phrase} for line in quote.lines]
    return page("order_review.html", who=who, req=req, ssh_key=ssh_key, quote=quote,
                lines=lines, hold=hold, wallet=money, short=hold > money.available,
                keys=len(req.ssh_keys), add=req.add, once=new_once())


@router.get("/instances/{instance_id}/release", response_class=HTMLResponse,
            openapi_extra=access(*ORDERING, owned=True))
def release_form(instance_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        return _release_page(p, who, instance_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


def _release_page(p: Platform, who: Principal, instance_id: str, status: int = 200
                  ) -> HTMLResponse:
    who.require_order_rights()
    inst = instances.show_instance(p, who, instance_id)
    return page("release.html", status, who=who, inst=inst,
                terms=release_terms(p, who, instance_id))


@router.post("/instances/{instance_id}/release", dependencies=[SameOrigin],
             openapi_extra=access(*ORDERING, owned=True))
def release(instance_id: str, p: PlatformDep, who: Who,
            confirmed: Annotated[bool, Form()] = False) -> Response:
    """Released only when confirmed on the page that says what is refunded and kept."""
    try:
        if not confirmed:
            return _release_page(p, who, instance_id)
        actions.release_instance(p, who, instance_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    return RedirectResponse(f"/console/instances/{instance_id}", status_code=303)


@router.post("/instances/{instance_id}/renew", dependencies=[SameOrigin],
             openapi_extra=access(*ORDERING, owned=True))
def renew(instance_id: str, p: PlatformDep, who: Who, periods: Annotated[int, Form()] = 1,
          term: Annotated[str | None, Form(max_length=16)] = None,
          confirmed: Annotated[bool, Form()] = False, once: Once = None) -> Response:
    """The renewal's charge and new end first; charged when confirmed, once per review
    (its one-time key: a resubmitted confirmation renews once)."""
    try:
        who.require_order_rights()
        if not confirmed:
            quote = leases.renewal_quote(p, who, instance_id, periods, term or None)
            return page("renew_review.html", who=who, quote=quote,
                        wallet=wallet.show_wallet(p, who), once=new_once())
        leases.renew(p, who, instance_id, periods, term or None,
                     once=once_key(once))
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc),
                    back=f"/console/instances/{instance_id}")
    return RedirectResponse(f"/console/instances/{instance_id}", status_code=303)


@router.post("/instances/{instance_id}/auto-renew", dependencies=[SameOrigin],
             openapi_extra=access(*ORDERING, owned=True))
def auto_renew(instance_id: str, p: PlatformDep, who: Who,
               on: Annotated[bool, Form()] = False) -> Response:
    try:
        leases.set_auto_renew(p, who, instance_id, on)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    return RedirectResponse(f"/console/instances/{instance_id}", status_code=303)
