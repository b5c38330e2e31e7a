from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

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
from gpulease.api.etags import conditional
from gpulease.api.streams import ENDS, follow_instance
from gpulease.schemas import CredentialsView, InstanceView, OrderRequest, Page
from gpulease.schemas.fleet import PowerActionView, PowerRequest
from gpulease.schemas.money import OrderReviewView
from gpulease.services.instances import actions
from gpulease.services.instances import power as power_actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.services.orders import review as order_review

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


@router.post("/review", response_model=OrderReviewView, openapi_extra=access(*ORDERING))
def review(body: OrderRequest, p: PlatformDep, actor: PrincipalDep) -> OrderReviewView:
    """An order checked as `POST /instances` would check it, and what it would hold from
    the wallet; nothing is held or claimed (the CLI asks with it before it orders)."""
    return order_review.review_order(p, actor, body)


@router.get("", response_model=Page[InstanceView], openapi_extra=access(*EVERY_USER))
def list_instances(
    p: PlatformDep, actor: PrincipalDep, request: Request, limit: Limit = 50,
    offset: Offset = 0, status: Annotated[str | None, Query()] = None,
    expand: Annotated[str | None, Query(
        description="`stages`: each item's whole delivery history (left out by default: "
        "GET /instances/{id} has it)")] = None,
) -> Response:
    """A page of summaries in a constant number of SQL statements; an instance's summary
    is serialized again only when it changed. Sends an ETag (304 to If-None-Match)."""
    return conditional(request, instances.list_instances_json(
        p, actor, status=status, limit=limit, offset=offset, expand=expand))


@router.get("/{instance_id}", response_model=InstanceView,
            openapi_extra=access(*EVERY_USER, owned=True))
def show(instance_id: str, p: PlatformDep, actor: PrincipalDep, request: Request
         ) -> Response:
    """The instance with its whole history. Sends an ETag: a poller that sends it back in
    If-None-Match gets 304 until the instance changes (or follow /events instead)."""
    return conditional(request, instances.show_instance(p, actor, instance_id)
                       .model_dump_json())


@router.get("/{instance_id}/events", openapi_extra=access(*EVERY_USER, owned=True),
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "server-sent events"}})
async def follow(
    instance_id: str, p: PlatformDep, actor: PrincipalDep, request: Request,
    until: Annotated[str, Query(description="statuses that end the stream, comma-separated",
                                max_length=100)] = ",".join(ENDS),
    timeout: Annotated[float, Query(gt=0, le=3600, description="seconds at most")] = 1800,
) -> StreamingResponse:
    """Delivery progress pushed (server-sent events) instead of polled: an `instance` event
    with the instance as GET /instances/{id} returns it, at once and each time it changes
    (a stage, a node's stage, the status); `end` when its status is one of `until` (or at
    `timeout`). Comment lines keep a quiet stream open."""
    return await follow_instance(p, actor, request, instance_id, until, timeout)


@router.post("/{instance_id}/release", response_model=InstanceView, status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def release(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> InstanceView:
    return actions.release_instance(p, actor, instance_id)


@router.post("/{instance_id}/credentials", response_model=CredentialsView, responses=GONE,
             openapi_extra=access(*ORDERING, owned=True))
def credentials(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> CredentialsView:
    """The root password, shown once; later calls answer 410."""
    return actions.reveal_credentials(p, actor, instance_id)


@router.post("/{instance_id}/power", response_model=PowerActionView, status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def power(instance_id: str, body: PowerRequest, p: PlatformDep, actor: PrincipalDep
          ) -> PowerActionView:
    """Reboot or power cycle your delivered server (one server of a cluster with `node`),
    or restart your container. Sent by the worker at once; one at a time per instance (409
    while one is being sent). Nothing is erased and the lease runs on."""
    return power_actions.request_power(p, actor, instance_id, body.action, body.node)


@router.get("/{instance_id}/power", response_model=Page[PowerActionView],
            openapi_extra=access(*EVERY_USER, owned=True))
def power_history(instance_id: str, p: PlatformDep, actor: PrincipalDep, limit: Limit = 20,
                  offset: Offset = 0) -> Page[PowerActionView]:
    """The instance's power actions, newest first, with what each BMC answered, a page at
    a time."""
    return power_actions.power_actions(p, actor, instance_id, limit, offset)
