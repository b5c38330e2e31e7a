"""Fabrics and racks, the fleet's managed objects (operators)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpulease.api.access import Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.fleet import (
    FabricCreate,
    FabricUpdate,
    FabricView,
    RackCreate,
    RackUpdate,
    RackView,
)
from gpulease.services.fleet import fabrics as fleet_objects

router = APIRouter(tags=["nodes (operator)"])
OPERATOR = access(Caller.OPERATOR)


@router.get("/fabrics", response_model=Page[FabricView], openapi_extra=OPERATOR)
def list_fabrics(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
                 ) -> Page[FabricView]:
    """InfiniBand and RoCE fabrics with their speed, and the racks and nodes on each."""
    return Page[FabricView].of(fleet_objects.list_fabrics(p, actor), limit, offset)


@router.post("/fabrics", response_model=FabricView, status_code=201, openapi_extra=OPERATOR)
def create_fabric(body: FabricCreate, p: PlatformDep, actor: PrincipalDep) -> FabricView:
    return fleet_objects.create_fabric(p, actor, body)


@router.patch("/fabrics/{fabric_id}", response_model=FabricView, openapi_extra=OPERATOR)
def update_fabric(fabric_id: str, body: FabricUpdate, p: PlatformDep,
                  actor: PrincipalDep) -> FabricView:
    return fleet_objects.update_fabric(p, actor, fabric_id, body)


@router.delete("/fabrics/{fabric_id}", status_code=204, response_class=Response,
               openapi_extra=OPERATOR)
def delete_fabric(fabric_id: str, p: PlatformDep, actor: PrincipalDep) -> Response:
    """Only a fabric nothing is on (409 otherwise)."""
    fleet_objects.delete_fabric(p, actor, fabric_id)
    return Response(status_code=204)


@router.get("/racks", response_model=Page[RackView], openapi_extra=OPERATOR)
def list_racks(p: PlatformDep, actor: PrincipalDep,
               region: Annotated[str | None, Query()] = None, limit: Limit = 100,
               offset: Offset = 0) -> Page[RackView]:
    """Racks (of one region with `region`), with their fabric and nodes."""
    return Page[RackView].of(fleet_objects.list_racks(p, actor, region), limit, offset)


@router.post("/racks", response_model=RackView, status_code=201, openapi_extra=OPERATOR)
def create_rack(body: RackCreate, p: PlatformDep, actor: PrincipalDep) -> RackView:
    return fleet_objects.create_rack(p, actor, body)


@router.patch("/racks/{rack_id}", response_model=RackView, openapi_extra=OPERATOR)
def update_rack(rack_id: str, body: RackUpdate, p: PlatformDep,
                actor: PrincipalDep) -> RackView:
    return fleet_objects.update_rack(p, actor, rack_id, body)


@router.delete("/racks/{rack_id}", status_code=204, response_class=Response,
               openapi_extra=OPERATOR)
def delete_rack(rack_id: str, p: PlatformDep, actor: PrincipalDep) -> Response:
    """Only a rack no node is in (409 otherwise)."""
    fleet_objects.delete_rack(p, actor, rack_id)
    return Response(status_code=204)
