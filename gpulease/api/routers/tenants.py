"""Operators' tenants: the list, suspension and closing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import NodeActionRequest, Page, TenantSummary
from gpulease.services.accounts import tenants

router = APIRouter(tags=["accounts"])
OPERATOR = access(Caller.OPERATOR)


@router.get("/tenants", response_model=Page[TenantSummary], openapi_extra=OPERATOR)
def list_tenants(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0,
                 status: Annotated[str | None, Query(description="active, suspended or "
                                                     "closed")] = None,
                 ) -> Page[TenantSummary]:
    """Every tenant with its users, live instances and balance."""
    return tenants.list_tenants(p, actor, status, limit, offset)


@router.post("/tenants/{tenant_id}/suspend", response_model=TenantSummary,
             openapi_extra=OPERATOR)
def suspend(tenant_id: str, body: NodeActionRequest, p: PlatformDep,
            actor: PrincipalDep) -> TenantSummary:
    """New orders refused with the reason; running machines kept (the reason is required)."""
    return tenants.suspend(p, actor, tenant_id, body.reason)


@router.post("/tenants/{tenant_id}/reinstate", response_model=TenantSummary,
             openapi_extra=OPERATOR)
def reinstate(tenant_id: str, p: PlatformDep, actor: PrincipalDep) -> TenantSummary:
    return tenants.reinstate(p, actor, tenant_id)


@router.post("/tenants/{tenant_id}/close", response_model=TenantSummary,
             openapi_extra=OPERATOR)
def close(tenant_id: str, p: PlatformDep, actor: PrincipalDep,
          body: NodeActionRequest | None = None) -> TenantSummary:
    """Close an account once nothing is rented, unbilled or owed (409 says what is left):
    its users are disabled and their tokens end; its records stay."""
    return tenants.close(p, actor, tenant_id, body.reason if body else None)
