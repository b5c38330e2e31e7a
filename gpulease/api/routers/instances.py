from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpulease.api.access import EVERY_USER, ORDERING, access
from gpulease.api.deps import (
    GONE,
    PAYMENT_REQUIRED,
    IdempotencyKey,
    Limit,
    Offset,
    PlatformDep,
    PrincipalDep,
)
from gpulease.schemas import CredentialsView, InstanceView, OrderRequest, Page
from gpulease.services import instances, orders

router = APIRouter(prefix="/instances", tags=["instances"])


@router.post("", response_model=InstanceView, status_code=201, responses=PAYMENT_REQUIRED,
             openapi_extra=access(*ORDERING))
def order(
    body: OrderRequest, p: PlatformDep, actor: PrincipalDep, response: Response,
    idempotency_key: IdempotencyKey = None,
) -> InstanceView:
    """Order bare metal, a cluster on one fabric, or a container. Nodes are claimed at once
    (409 with what is free where when out of stock); delivery then runs in the worker."""
    view, created = orders.place_order(p, actor, body, idempotency_key)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return view


@router.get("", response_model=Page[InstanceView], openapi_extra=access(*EVERY_USER))
def list_instances(
    p: PlatformDep, actor: PrincipalDep, limit: Limit = 50, offset: Offset = 0,
    status: Annotated[str | None, Query()] = None,
) -> Page[InstanceView]:
    return instances.list_instances(p, actor, status=status, limit=limit, offset=offset)


@router.get("/{instance_id}", response_model=InstanceView,
            openapi_extra=access(*EVERY_USER, owned=True))
def show(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> InstanceView:
    return instances.show_instance(p, actor, instance_id)


@router.post("/{instance_id}/release", response_model=InstanceView, status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def release(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> InstanceView:
    return instances.release_instance(p, actor, instance_id)


@router.post("/{instance_id}/credentials", response_model=CredentialsView, responses=GONE,
             openapi_extra=access(*ORDERING, owned=True))
def credentials(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> CredentialsView:
    """The root password, shown once; later calls answer 410."""
    return instances.reveal_credentials(p, actor, instance_id)
