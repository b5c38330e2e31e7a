"""The operator's fleet in the console, filtered by status, offer and region; a server
enrolled by its BMC; and one node's page: what it is and where (rack, fabric, BMC), what
its BMC reported at enrollment against its offer (checked, different, unchecked), what
its agent reports now, its open alerts and tickets, and its history; drain, maintenance
and resume from there."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError, InvalidInput
from gpulease.lifecycle.history import reason_phrase
from gpulease.platform import Platform
from gpulease.schemas import EnrollRequest
from gpulease.services.fleet import enrollment, inventory
from gpulease.services.fleet.fabrics import list_fabrics
from gpulease.services.support import tickets
from gpulease.services.telemetry import pushes
from gpulease.web.pages import SameOrigin, Who, page, page_context, refusal, said

router = APIRouter(prefix="/console/nodes", include_in_schema=False,
                   dependencies=[Depends(page_context)])
OPERATOR = access(Caller.OPERATOR)


def _enroll_page(p: Platform, who: Principal, status: int = 200, **extra: Any
                 ) -> HTMLResponse:
    return page("enroll.html", status, who=who, offers=p.catalog.offers,
                fabrics=fabrics_of(p, who), **extra)


@router.get("/enroll", response_class=HTMLResponse, openapi_extra=OPERATOR)
def enroll_form(p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        who.require_operator()
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    return _enroll_page(p, who, form={})


@router.post("/enroll", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def enroll(p: PlatformDep, who: Who, bmc: Annotated[str, Form(max_length=300)],
           username: Annotated[str, Form(max_length=100)],
           password: Annotated[str, Form(max_length=200)],
           offer: Annotated[str | None, Form(max_length=200)] = None,
           name: Annotated[str | None, Form(max_length=100)] = None,
           fabric: Annotated[str | None, Form(max_length=64)] = None) -> Response:
    """One server by its BMC: checked against the offer (its report on the node's page),
    powered off to wait for its first order; a mismatch stays enrolling with its report."""
    typed = {"bmc": bmc, "username": username, "offer": offer or "", "name": name or "",
             "fabric": fabric or ""}
    try:
        who.require_operator()
        node = enrollment.enroll(p, who, EnrollRequest(
            bmc=bmc.strip(), username=username, password=password, offer=offer or None,
            name=name or None, fabric=fabric or None))
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        if status == 403:
            return page("base.html", status, who=who, error=why)
        return _enroll_page(p, who, status, error=why, form=typed)
    return RedirectResponse(f"/console/nodes/{node.id}", status_code=303)


@router.get("/{node_id}", response_class=HTMLResponse, openapi_extra=OPERATOR)
def node_page(node_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        node = inventory.get_node(p, who, node_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    bmc = (node.inventory or {}).get("bmc") or {}
    history = inventory.node_history(p, who, node.id, limit=50).items
    return page("node.html", who=who, node=node,
                reason_phrase=reason_phrase(history, node.status, node.status_reason),
                bmc_facts=[(k, v) for k, v in bmc.items()
                           if isinstance(v, str | int | float | bool) and v not in ("", None)],
                comparison=(node.inventory or {}).get("comparison"),
                alerts=pushes.node_alerts(p, who, node.id),
                tickets=tickets.list_tickets(p, who, tickets.TicketFilter(node_id=node.id),
                                             limit=50).items,
                history=history)


@router.post("/{node_id}/{action}", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def node_action(node_id: str, action: str, p: PlatformDep, who: Who,
                reason: Annotated[str | None, Form(max_length=500)] = None,
                back: Annotated[str, Form(max_length=300)] = "/console/") -> Response:
    """Drain (maintenance once free), maintenance now, or resume a node."""
    acts = {"drain": lambda: inventory.drain_node(p, who, node_id, reason or None),
            "maintenance": lambda: inventory.maintenance_node(p, who, node_id, reason or None),
            "resume": lambda: inventory.resume_node(p, who, node_id)}
    try:
        who.require_operator()
        if action not in acts:
            raise InvalidInput("action", "Unknown node action {action!r}.", sorted(acts),
                               action=action)
        acts[action]()
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    here = back if back.startswith("/console") and "//" not in back else "/console/"
    return RedirectResponse(here, status_code=303)


def fabrics_of(p: Platform, who: Principal) -> list[str]:
    return [f.id for f in list_fabrics(p, who)]


def fleet_filters(status: Annotated[str | None, Query(max_length=16)] = None,
                  sku: Annotated[str | None, Query(max_length=100)] = None,
                  region: Annotated[str | None, Query(max_length=100)] = None
                  ) -> dict[str, str | None]:
    return {"status": status or None, "sku": sku or None, "region": region or None}
