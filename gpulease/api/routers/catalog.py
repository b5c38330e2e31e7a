from __future__ import annotations

from fastapi import APIRouter, Response

from gpulease.api.deps import PlatformDep, PrincipalDep
from gpulease.schemas import CatalogView, ImageView
from gpulease.services import catalog

router = APIRouter(tags=["catalog"])


@router.get("/catalog", response_model=CatalogView)
def get_catalog(p: PlatformDep, _: PrincipalDep) -> Response:
    """Every offer with its prices (month, derived day and year) and live stock."""
    # Serialized directly: the view is already a validated CatalogView.
    return Response(catalog.catalog_view(p).model_dump_json(), media_type="application/json")


@router.get("/images", response_model=list[ImageView])
def list_images(p: PlatformDep, _: PrincipalDep) -> list[ImageView]:
    return catalog.images(p)
