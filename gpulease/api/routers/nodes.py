from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import Caller, access
from gpulease.api.deps import IdempotencyKey, Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import (
    EnrollRequest,
    FleetCount,
    NodeActionRequest,
    NodeEventView,
    NodeView,
    Page,
)
from gpulease.schemas.fleet import (
    NodeFaults,
    NodeFilter,
    NodeUpdate,
    RepairDone,
    RepairStart,
    RepairView,
)
from gpulease.services.fleet import enrollment, inventory, node_changes
from gpulease.services.platform.idempotency import idem_for
from gpulease.services.support import repairs

router = APIRouter(prefix="/nodes", tags=["nodes (operator)"])


@router.get("", response_model=Page[NodeView], openapi_extra=access(Caller.OPERATOR))
def list_nodes(
    p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0,
    status: Annotated[str | None, Query()] = None,
    region: Annotated[str | None, Query()] = None,
    sku: Annotated[str | None, Query()] = None,
    fabric: Annotated[str | None, Query(description="InfiniBand fabric id")] = None,
    rack: Annotated[str | None, Query()] = None,
) -> Page[NodeView]:
    return inventory.list_nodes(p, actor, NodeFilter(status, region, sku, fabric, rack),
                                limit, offset)


@router.get("/counts", response_model=Page[FleetCount], openapi_extra=access(Caller.OPERATOR))
def counts(p: PlatformDep, actor: PrincipalDep, limit: Limit = 500, offset: Offset = 0
           ) -> Page[FleetCount]:
    """Nodes per region, rack, fabric and status, a page of such counts at a time."""
    return Page[FleetCount].of(inventory.fleet_counts(p, actor), limit, offset)


@router.post("", response_model=NodeView, status_code=201, openapi_extra=access(Caller.OPERATOR))
def enroll(body: EnrollRequest, p: PlatformDep, actor: PrincipalDep,
           key: IdempotencyKey = None) -> NodeView:
    """Enroll a server by its Redfish BMC: credentials checked, inventory read and compared
    with the offer. A match is available; a mismatch stays enrolling with its report."""
    return enrollment.enroll(p, actor, body, idem_for(key, "node", body))


@router.get("/{node_id}", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def show(node_id: str, p: PlatformDep, actor: PrincipalDep) -> NodeView:
    return inventory.get_node(p, actor, node_id)


@router.patch("/{node_id}", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def update(node_id: str, body: NodeUpdate, p: PlatformDep, actor: PrincipalDep) -> NodeView:
    """Rename a node, move it to another rack or fabric (not while a tenant holds it), or
    store new BMC credentials (tried on the BMC first unless verify is false)."""
    return node_changes.update_node(p, actor, node_id, body)


@router.delete("/{node_id}", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def delete(node_id: str, p: PlatformDep, actor: PrincipalDep,
           reason: Annotated[str | None, Query(max_length=500)] = None) -> NodeView:
    """Remove a node from the fleet (never while a tenant holds it). Its record, history and
    erase certificates stay, found by id; the server may be enrolled again."""
    return node_changes.delete_node(p, actor, node_id, reason)


@router.put("/{node_id}/faults", response_model=list[str],
            openapi_extra=access(Caller.OPERATOR))
def faults(node_id: str, body: NodeFaults, p: PlatformDep, actor: PrincipalDep) -> list[str]:
    """Demo and drills: the GPU faults a simulated server reports from now on (its stand-in
    agent's telemetry and acceptance); 409 for real hardware."""
    return node_changes.inject_faults(p, actor, node_id, body.faults)


@router.post("/{node_id}/repair", response_model=RepairView,
             openapi_extra=access(Caller.OPERATOR))
def repair(node_id: str, body: RepairStart, p: PlatformDep, actor: PrincipalDep
           ) -> RepairView:
    """A free node (available, maintenance, retired) goes for repair (a reason or a
    ticket)."""
    return repairs.send_to_repair(p, actor, node_id, body.reason, body.ticket)


@router.post("/{node_id}/repaired", response_model=RepairView,
             openapi_extra=access(Caller.OPERATOR))
def repaired(node_id: str, body: RepairDone, p: PlatformDep, actor: PrincipalDep
             ) -> RepairView:
    """The parts replaced (with serials) are recorded; the node is erased and returns to
    the pool (its acceptance suite runs at its next delivery)."""
    return repairs.finish(p, actor, node_id, body.parts)


@router.get("/{node_id}/history", response_model=Page[NodeEventView],
            openapi_extra=access(Caller.OPERATOR))
def history(node_id: str, p: PlatformDep, actor: PrincipalDep, limit: Limit = 100,
            offset: Offset = 0) -> Page[NodeEventView]:
    """The node's history, newest first: transitions, errors, results and notes, with who
    caused each."""
    return inventory.node_history(p, actor, node_id, limit=limit, offset=offset)


@router.post("/{node_id}/drain", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def drain(node_id: str, p: PlatformDep, actor: PrincipalDep,
          body: NodeActionRequest | None = None) -> NodeView:
    return inventory.drain_node(p, actor, node_id, body.reason if body else None)


@router.post("/{node_id}/maintenance", response_model=NodeView,
             openapi_extra=access(Caller.OPERATOR))
def maintenance(node_id: str, p: PlatformDep, actor: PrincipalDep,
                body: NodeActionRequest | None = None) -> NodeView:
    return inventory.maintenance_node(p, actor, node_id, body.reason if body else None)


@router.post("/{node_id}/retire", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def retire(node_id: str, p: PlatformDep, actor: PrincipalDep,
           body: NodeActionRequest | None = None) -> NodeView:
    """A node in maintenance declared broken beyond repair (the reason is required)."""
    return inventory.retire_node(p, actor, node_id, body.reason if body else None)


@router.post("/{node_id}/resume", response_model=NodeView, openapi_extra=access(Caller.OPERATOR))
def resume(node_id: str, p: PlatformDep, actor: PrincipalDep) -> NodeView:
    return inventory.resume_node(p, actor, node_id)
