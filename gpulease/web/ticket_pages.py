"""Tickets in the console. A tenant opens one about an instance (P1 down, P2 degraded, P3
a question), follows its timeline and comments; an operator works the queue, open first,
with each SLA clock (response, mitigation, resolution) due, at risk or breached, and
acknowledges, mitigates and resolves (with a note), or comments internally."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from gpulease.api.access import EVERY_USER, ORDERING, Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError
from gpulease.domain.states import INSTANCE_LIVE
from gpulease.platform import Platform
from gpulease.schemas.tickets import TicketAction, TicketComment, TicketOpen
from gpulease.services.instances import views as instances
from gpulease.services.support import tickets
from gpulease.web.pages import SameOrigin, Who, page, page_context, refusal, said

router = APIRouter(prefix="/console/tickets", include_in_schema=False,
                   dependencies=[Depends(page_context)])
Note = Annotated[str | None, Form(max_length=10_000)]


def _queue(p: Platform, who: Principal, status: int = 200, open_only: bool = True,
           **extra: Any) -> HTMLResponse:
    listed = tickets.list_tickets(p, who, tickets.TicketFilter(open_only=open_only), limit=200)
    mine = [] if who.is_operator else [
        i for i in instances.list_instances(p, who, limit=200).items if i.status in INSTANCE_LIVE]
    return page("tickets.html", status, who=who, tickets=listed.items, total=listed.total,
                open_only=open_only, instances=mine, now=p.clock.now(), **extra)


@router.get("", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def ticket_queue(p: PlatformDep, who: Who,
                 show: Annotated[str, Query(max_length=8)] = "open") -> HTMLResponse:
    return _queue(p, who, open_only=show != "all")


@router.post("", dependencies=[SameOrigin], openapi_extra=access(*ORDERING))
def open_ticket(p: PlatformDep, who: Who, summary: Annotated[str, Form(max_length=300)],
                instance_id: Annotated[str, Form(max_length=32)] = "",
                severity: Annotated[str, Form(max_length=2)] = "P2",
                gpu: Annotated[str | None, Form(max_length=3)] = None,
                details: Note = None) -> Response:
    try:
        who.require_order_rights()
        made = tickets.open_by_tenant(p, who, TicketOpen(
            instance_id=instance_id or None, summary=summary.strip(), severity=severity,
            gpu=int(gpu) if gpu and gpu.strip().isdigit() else None, details=details or None))
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        return _queue(p, who, status, error=why,
                      typed={"instance_id": instance_id, "summary": summary,
                             "severity": severity, "gpu": gpu or "", "details": details or ""})
    return RedirectResponse(f"/console/tickets/{made.id}", status_code=303)


def _detail(p: Platform, who: Principal, ticket_id: str, status: int = 200, **extra: Any
            ) -> HTMLResponse:
    return page("ticket.html", status, who=who, t=tickets.show_ticket(p, who, ticket_id),
                now=p.clock.now(), **extra)


@router.get("/{ticket_id}", response_class=HTMLResponse,
            openapi_extra=access(*EVERY_USER, owned=True))
def ticket_page(ticket_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        return _detail(p, who, ticket_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))


def _act(p: Platform, who: Principal, ticket_id: str, act: Any) -> Response:
    try:
        act()
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        try:
            return _detail(p, who, ticket_id, status, error=why)
        except DomainError:
            return page("base.html", status, who=who, error=why)
    return RedirectResponse(f"/console/tickets/{ticket_id}", status_code=303)


@router.post("/{ticket_id}/comment", dependencies=[SameOrigin],
             openapi_extra=access(Caller.OPERATOR, *ORDERING, owned=True))
def comment(ticket_id: str, p: PlatformDep, who: Who,
            body: Annotated[str, Form(max_length=10_000)],
            internal: Annotated[bool, Form()] = False) -> Response:
    return _act(p, who, ticket_id, lambda: tickets.comment(
        p, who, ticket_id, TicketComment(body=body, internal=internal and who.is_operator)))


OPERATOR = access(Caller.OPERATOR, owned=True)


@router.post("/{ticket_id}/acknowledge", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def acknowledge(ticket_id: str, p: PlatformDep, who: Who, note: Note = None) -> Response:
    return _act(p, who, ticket_id, lambda: tickets.acknowledge(
        p, who, ticket_id, TicketAction(note=note or None)))


@router.post("/{ticket_id}/mitigate", dependencies=[SameOrigin], openapi_extra=OPERATOR)
def mitigate(ticket_id: str, p: PlatformDep, who: Who, note: Note = None) -> Response:
    return _act(p, who, ticket_id, lambda: tickets.mitigate(
        p, who, ticket_id, TicketAction(note=note or None)))


@router.post("/{ticket_id}/resolve", dependencies=[SameOrigin],
             openapi_extra=access(Caller.OPERATOR, *ORDERING, owned=True))
def resolve(ticket_id: str, p: PlatformDep, who: Who, note: Note = None) -> Response:
    """An operator resolves any ticket; a tenant withdraws a report of their own."""
    return _act(p, who, ticket_id, lambda: tickets.resolve(
        p, who, ticket_id, TicketAction(note=note or None)))
