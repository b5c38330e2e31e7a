"""Tickets: tenants' own and every one for operators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import EVERY_USER, Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.tickets import (
    RepairWindowAnswer,
    RepairWindowProposal,
    SwapRequest,
    TicketAction,
    TicketComment,
    TicketDetail,
    TicketOpen,
    TicketView,
)
from gpulease.services.support import card_repairs, replacement, tickets

router = APIRouter(prefix="/tickets", tags=["tickets"])
OWN = access(*EVERY_USER, owned=True)
WRITERS = access(Caller.MEMBER, Caller.ADMIN, Caller.OPERATOR, owned=True)


@router.get("", response_model=Page[TicketView], openapi_extra=access(*EVERY_USER))
def list_tickets(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0,
                 status: Annotated[str | None, Query(description="open, acknowledged, "
                                                     "mitigated or resolved")] = None,
                 open_only: Annotated[bool, Query(alias="open")] = False,
                 instance: Annotated[str | None, Query(max_length=32)] = None,
                 ) -> Page[TicketView]:
    """Tickets, newest first, with their SLA clocks (breached, at risk): a tenant's own, or
    every one for an operator."""
    return tickets.list_tickets(p, actor, tickets.TicketFilter(
        status=status, open_only=open_only, instance_id=instance), limit=limit, offset=offset)


@router.post("", response_model=TicketDetail, status_code=201,
             openapi_extra=access(Caller.MEMBER, Caller.ADMIN))
def open_ticket(body: TicketOpen, p: PlatformDep, actor: PrincipalDep) -> TicketDetail:
    """A tenant reports a problem with one of their instances."""
    return tickets.open_by_tenant(p, actor, body)


@router.get("/{ticket_id}", response_model=TicketDetail, openapi_extra=OWN)
def show(ticket_id: str, p: PlatformDep, actor: PrincipalDep) -> TicketDetail:
    """One ticket with its timeline: moves, comments, evidence (operators also see internal
    notes)."""
    return tickets.show_ticket(p, actor, ticket_id)


@router.post("/{ticket_id}/comments", response_model=TicketDetail, openapi_extra=WRITERS)
def comment(ticket_id: str, body: TicketComment, p: PlatformDep,
            actor: PrincipalDep) -> TicketDetail:
    """A comment; an operator's first reply is the ticket's first response."""
    return tickets.comment(p, actor, ticket_id, body)


@router.post("/{ticket_id}/ack", response_model=TicketDetail,
             openapi_extra=access(Caller.OPERATOR))
def acknowledge(ticket_id: str, p: PlatformDep, actor: PrincipalDep,
                body: TicketAction | None = None) -> TicketDetail:
    return tickets.acknowledge(p, actor, ticket_id, body or TicketAction())


@router.post("/{ticket_id}/mitigate", response_model=TicketDetail,
             openapi_extra=access(Caller.OPERATOR))
def mitigate(ticket_id: str, p: PlatformDep, actor: PrincipalDep,
             body: TicketAction | None = None) -> TicketDetail:
    """The tenant is served again (moved, fixed, a workaround): the mitigation clock stops."""
    return tickets.mitigate(p, actor, ticket_id, body or TicketAction())


@router.post("/{ticket_id}/swap", response_model=TicketDetail,
             openapi_extra=access(Caller.OPERATOR))
def swap(ticket_id: str, p: PlatformDep, actor: PrincipalDep,
         body: SwapRequest | None = None) -> TicketDetail:
    """Replace the ticket's rented node by a spare of the same offer (same fabric for a
    cluster): deployed and accepted as at delivery, a new root password shown once; the
    faulty node is erased and goes to repair. With `copy_data`, the faulty server serves on
    while its data disk is copied to the spare (`via`: straight from agent to agent, or
    through the tenant's bucket), each file verified, before the faulty one is erased. 409
    when no spare is free (the ticket says so)."""
    body = body or SwapRequest()
    return replacement.swap(p, actor, ticket_id, replacement.Swap(
        body.note, body.copy_data, body.path, body.via))


@router.post("/{ticket_id}/repair-window", response_model=TicketDetail,
             openapi_extra=access(Caller.OPERATOR))
def propose_repair_window(ticket_id: str, body: RepairWindowProposal, p: PlatformDep,
                          actor: PrincipalDep) -> TicketDetail:
    """The card path: propose when the ticket's rented node goes out to be repaired in
    place (powered off, disks kept); its tenant accepts or declines. Once it is repaired
    (`POST /nodes/{id}/repaired`) it is burned in and accepted before the tenant has it
    back."""
    return card_repairs.propose_window(p, actor, ticket_id, body)


@router.post("/{ticket_id}/repair-window/answer", response_model=TicketDetail,
             openapi_extra=access(Caller.MEMBER, Caller.ADMIN, owned=True))
def answer_repair_window(ticket_id: str, body: RepairWindowAnswer, p: PlatformDep,
                         actor: PrincipalDep) -> TicketDetail:
    """The tenant accepts the proposed repair window (the node goes out at its start) or
    declines it (the operators propose another or swap the server)."""
    return card_repairs.answer_window(p, actor, ticket_id, body)


@router.post("/{ticket_id}/resolve", response_model=TicketDetail, openapi_extra=WRITERS)
def resolve(ticket_id: str, p: PlatformDep, actor: PrincipalDep,
            body: TicketAction | None = None) -> TicketDetail:
    """An operator resolves a ticket; a tenant may withdraw a report of their own."""
    return tickets.resolve(p, actor, ticket_id, body or TicketAction())
