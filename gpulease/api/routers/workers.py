"""The worker registry, for operators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page, SiteView, WorkerView
from gpulease.schemas.fleet import BreakerView, RepairView
from gpulease.services.fleet import deploy_breaker
from gpulease.services.platform import sites, workers
from gpulease.services.support import repairs

router = APIRouter(tags=["nodes (operator)"])


@router.get("/workers", response_model=Page[WorkerView], openapi_extra=access(Caller.OPERATOR))
def list_workers(p: PlatformDep, actor: PrincipalDep,
                 stopped: Annotated[bool, Query(description="include stopped ones")] = False,
                 limit: Limit = 100, offset: Offset = 0) -> Page[WorkerView]:
    """The worker processes: host, pid, since when, last heartbeat, rows claimed, and
    whether it is alive, dead (silent for three heartbeats) or stopped."""
    return Page[WorkerView].of(workers.list_workers(p, actor, include_stopped=stopped), limit,
                               offset)


@router.get("/sites", response_model=Page[SiteView], openapi_extra=access(Caller.OPERATOR))
def list_sites(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
               ) -> Page[SiteView]:
    """Each site (data centre): its regions, whether it has workers of its own, how many
    live workers serve it, and whether orders for it are taken (false: refused with 503)."""
    return Page[SiteView].of(sites.list_sites(p, actor), limit, offset)


@router.get("/breaker", response_model=BreakerView, openapi_extra=access(Caller.OPERATOR))
def breaker(p: PlatformDep, actor: PrincipalDep) -> BreakerView:
    """The deploy circuit breaker: closed, or open with how the latest deploys failed and
    how many deploys it holds."""
    return deploy_breaker.view(p, actor)


@router.post("/breaker/reset", response_model=BreakerView,
             openapi_extra=access(Caller.OPERATOR))
def reset_breaker(p: PlatformDep, actor: PrincipalDep) -> BreakerView:
    """Close an open breaker (the cause is fixed): held deploys retry at once (409 when
    closed)."""
    return deploy_breaker.reset(p, actor)


@router.get("/repairs", response_model=Page[RepairView], openapi_extra=access(Caller.OPERATOR))
def list_repairs(p: PlatformDep, actor: PrincipalDep,
                 open_only: Annotated[bool, Query(alias="open")] = False,
                 limit: Limit = 100, offset: Offset = 0) -> Page[RepairView]:
    """Repairs, newest first: node, offer, ticket, parts and serials, time to repair."""
    return repairs.list_repairs(p, actor, open_only, limit, offset)
