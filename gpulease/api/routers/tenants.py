"""Operators' tenants: the list, suspension and closing, GPU quotas."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import TENANT_USERS, Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import (
    GpuQuotaRequest,
    GpuQuotaView,
    NodeActionRequest,
    Page,
    TenantSummary,
)
from gpulease.services.accounts import quotas, tenants

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


@router.get("/gpu-quotas", response_model=Page[GpuQuotaView],
            openapi_extra=access(*TENANT_USERS))
def my_gpu_quotas(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
                  ) -> Page[GpuQuotaView]:
    """Your tenant's GPU quotas, each with the GPUs you hold under it."""
    return Page[GpuQuotaView].of(quotas.list_quotas(p, actor), limit, offset)


@router.get("/tenants/{tenant_id}/gpu-quotas", response_model=Page[GpuQuotaView],
            openapi_extra=OPERATOR)
def gpu_quotas(tenant_id: str, p: PlatformDep, actor: PrincipalDep, limit: Limit = 100,
               offset: Offset = 0) -> Page[GpuQuotaView]:
    """A tenant's GPU quotas, each with the GPUs it holds under it."""
    return Page[GpuQuotaView].of(quotas.list_quotas(p, actor, tenant_id), limit, offset)


@router.put("/tenants/{tenant_id}/gpu-quotas/{offer}", response_model=GpuQuotaView,
            openapi_extra=OPERATOR)
def set_gpu_quota(tenant_id: str, offer: str, body: GpuQuotaRequest, p: PlatformDep,
                  actor: PrincipalDep) -> GpuQuotaView:
    """Cap the GPUs the tenant holds at once: `*` for all, or an offer (`sku@region`) for
    its share of that offer's stock. Orders beyond it are refused (409); nothing running
    is touched."""
    return quotas.set_quota(p, actor, tenant_id, offer, body.max_gpus, body.reason)


@router.delete("/tenants/{tenant_id}/gpu-quotas/{offer}", status_code=204,
               openapi_extra=OPERATOR)
def remove_gpu_quota(tenant_id: str, offer: str, p: PlatformDep, actor: PrincipalDep) -> None:
    quotas.remove_quota(p, actor, tenant_id, offer)
