"""The worker registry, for operators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpulease.api.access import Caller, access
from gpulease.api.deps import PlatformDep, PrincipalDep
from gpulease.schemas import WorkerView
from gpulease.services import workers

router = APIRouter(tags=["nodes (operator)"])


@router.get("/workers", response_model=list[WorkerView], openapi_extra=access(Caller.OPERATOR))
def list_workers(p: PlatformDep, actor: PrincipalDep,
                 stopped: Annotated[bool, Query(description="include stopped ones")] = False,
                 ) -> list[WorkerView]:
    """Every worker process: host, pid, since when, last heartbeat, rows claimed, and
    whether it is alive, dead (silent for three heartbeats) or stopped."""
    return workers.list_workers(p, actor, include_stopped=stopped)
