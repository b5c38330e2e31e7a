"""The catalog: offers with their prices and live stock, OS images, the published catalog's
version and its reload, and the sizing advisor over them."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from gpulease.api.access import EVERY_USER, Caller, access
from gpulease.api.deps import (
    IdempotencyKey,
    Limit,
    Offset,
    PlatformDep,
    PrincipalDep,
    TokenDep,
    meter_refused,
)
from gpulease.api.etags import conditional
from gpulease.schemas import CatalogView, ImageCreate, ImageView, Page
from gpulease.schemas.advisor import AdviceView, AdviseRequest
from gpulease.schemas.fleet import CatalogReload, CatalogVersionView
from gpulease.services.accounts.identity import authenticate
from gpulease.services.catalog import images
from gpulease.services.catalog import offers as catalog
from gpulease.services.catalog import versions as catalog_versions
from gpulease.services.catalog.advisor import advise_job
from gpulease.services.platform.idempotency import idem_for

router = APIRouter(tags=["catalog"])


@router.get("/catalog", response_model=CatalogView, openapi_extra=access(*EVERY_USER))
async def get_catalog(p: PlatformDep, token: TokenDep, request: Request) -> Response:
    """Every offer with its prices (month, derived day and year) and live stock. Sends an
    ETag: a poller that sends it back in If-None-Match gets 304 until something changed."""

    def answer() -> str:
        with p.db.connection() as conn:
            if authenticate(p, token, conn).is_meter:  # it checks its token itself
                raise meter_refused()
            return catalog.catalog_json(p, conn)

    # The most read endpoint: the token check and the stock query share one worker thread
    # and one connection, and an answer already built for the same stock and prices is
    # sent again.
    return conditional(request, await run_in_threadpool(answer))


@router.get("/catalog/version", response_model=CatalogVersionView | None,
            openapi_extra=access(Caller.OPERATOR))
def catalog_version(p: PlatformDep, actor: PrincipalDep) -> CatalogVersionView | None:
    """The published catalog version in force (and the one the answering process prices
    from: the same within GPULEASE_CATALOG_FOLLOW_S of a reload)."""
    actor.require_operator()
    return catalog_versions.current(p)


@router.post("/catalog/reload", response_model=CatalogVersionView,
             openapi_extra=access(Caller.OPERATOR))
def reload_catalog(p: PlatformDep, actor: PrincipalDep,
                   body: CatalogReload | None = None) -> CatalogVersionView:
    """Publish a catalog to every process: the TOML text sent, else the server's catalog
    file. Validated first (422 in one line naming file, entry and field; nothing changes);
    the same text as the version in force publishes nothing new."""
    return catalog_versions.publish(p, actor, body.text if body else None)


@router.get("/images", response_model=Page[ImageView], openapi_extra=access(*EVERY_USER))
def list_images(p: PlatformDep, _: PrincipalDep, limit: Limit = 100, offset: Offset = 0
                ) -> Page[ImageView]:
    """Catalog images and operator-added custom images, a page at a time."""
    return Page[ImageView].of(images.list_images(p), limit, offset)


@router.post("/images", response_model=ImageView, status_code=201,
             openapi_extra=access(Caller.OPERATOR))
def add_image(body: ImageCreate, p: PlatformDep, actor: PrincipalDep,
              key: IdempotencyKey = None) -> ImageView:
    """Operator: add a custom OS image by URL and SHA-256 checksum."""
    return images.add_image(p, actor, body, idem_for(key, "image", body))


@router.delete("/images/{image_id}", status_code=204, openapi_extra=access(Caller.OPERATOR))
def remove_image(image_id: str, p: PlatformDep, actor: PrincipalDep) -> Response:
    """Operator: remove a custom image no live instance uses."""
    images.remove_image(p, actor, image_id)
    return Response(status_code=204)


@router.post("/advise", response_model=AdviceView, tags=["advisor"],
             openapi_extra=access(*EVERY_USER))
def advise(body: AdviseRequest, p: PlatformDep, actor: PrincipalDep) -> AdviceView:
    """The sizing advisor: memory term by term (with the seeds' quick estimate beside it),
    the offers and GPU counts that fit ranked by the job's total cost, time estimates, bare
    metal or container with the reasons, warnings. Reads today's prices and live stock."""
    return advise_job(p, body)
