"""The worker registry, for operators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep, PrincipalDep
from gpulease.schemas import SiteView, WorkerView
from gpulease.schemas.fleet import BreakerView, RepairView
from gpulease.services.fleet import deploy_breaker
from gpulease.services.platform import sites, workers
from gpulease.services.support import repairs

router = APIRouter(tags=["nodes (operator)"])


@router.get("/workers", response_model=list[WorkerView], openapi_extra=access(Caller.OPERATOR))
def list_workers(p: PlatformDep, actor: PrincipalDep,
                 stopped: Annotated[bool, Query(description="include stopped ones")] = False,
                 ) -> list[WorkerView]:
    """Every worker process: host, pid, since when, last heartbeat, rows claimed, and
    whether it is alive, dead (silent for three heartbeats) or stopped."""
    return workers.list_workers(p, actor, include_stopped=stopped)


@router.get("/sites", response_model=list[SiteView], openapi_extra=access(Caller.OPERATOR))
def list_sites(p: PlatformDep, actor: PrincipalDep) -> list[SiteView]:
    """Each site (data centre): its regions, whether it has workers of its own, how many
    live workers serve it, and whether orders for it are taken (false: refused with 503)."""
    return sites.list_sites(p, actor)


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


@router.get("/repairs", response_model=list[RepairView], openapi_extra=access(Caller.OPERATOR))
def list_repairs(p: PlatformDep, actor: PrincipalDep,
                 open_only: Annotated[bool, Query(alias="open")] = False,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[RepairView]:
    """Repairs, newest first: node, offer, ticket, parts and serials, time to repair."""
    return repairs.list_repairs(p, actor, open_only, limit)
