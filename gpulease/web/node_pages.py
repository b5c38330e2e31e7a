"""The operator's fleet in the console, filtered by status, offer, region or name, and one
node's page: what it is and where (rack, fabric, BMC), what its BMC reported at enrollment
against its offer (checked, different, unchecked), what its agent reports now, its open
alerts and tickets, and its history; drain, maintenance and resume from there."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.errors import DomainError, InvalidInput
from gpulease.services import agents, inventory, tickets
from gpulease.web.pages import SameOrigin, Who, page, page_context

router = APIRouter(prefix="/console/nodes", include_in_schema=False,
                   dependencies=[Depends(page_context)])
OPERATOR = access(Caller.OPERATOR)


@router.get("/{node_id}", response_class=HTMLResponse, openapi_extra=OPERATOR)
def node_page(node_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        node = inventory.get_node(p, who, node_id)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=exc.detail)
    bmc = (node.inventory or {}).get("bmc") or {}
    return page("node.html", who=who, node=node,
                bmc_facts=[(k, v) for k, v in bmc.items()
                           if isinstance(v, str | int | float | bool) and v not in ("", None)],
                comparison=(node.inventory or {}).get("comparison"),
                alerts=agents.node_alerts(p, who, node.id),
                tickets=tickets.list_tickets(p, who, node_id=node.id, limit=50).items,
                history=inventory.node_history(p, who, node.id, limit=50).items)


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
            raise InvalidInput("action", f"Unknown node action {action!r}.", sorted(acts))
        acts[action]()
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=exc.detail)
    here = back if back.startswith("/console") and "//" not in back else "/console/"
    return RedirectResponse(here, status_code=303)


def fleet_filters(status: Annotated[str | None, Query(max_length=16)] = None,
                  sku: Annotated[str | None, Query(max_length=100)] = None,
                  region: Annotated[str | None, Query(max_length=100)] = None
                  ) -> dict[str, str | None]:
    return {"status": status or None, "sku": sku or None, "region": region or None}
