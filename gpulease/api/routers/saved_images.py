"""Saved environments: a tenant's container instance saved as an image, for later orders."""

from __future__ import annotations

from fastapi import APIRouter

from gpulease.api.access import ORDERING, TENANT_USERS, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import Page
from gpulease.schemas.fleet import SavedImageView, SaveImageRequest
from gpulease.services.storage import saved_images

router = APIRouter(tags=["saved images"])


@router.post("/instances/{instance_id}/image", response_model=SavedImageView,
             status_code=202, openapi_extra=access(*ORDERING, owned=True))
def save(instance_id: str, body: SaveImageRequest, p: PlatformDep, actor: PrincipalDep
         ) -> SavedImageView:
    """Save a running container instance as an image in the platform's registry (its /data
    volume stays out); order containers from it later with `"image": "my/NAME"`."""
    return saved_images.save(p, actor, instance_id, body.name)


@router.get("/saved-images", response_model=Page[SavedImageView],
            openapi_extra=access(*TENANT_USERS))
def list_saved(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
               ) -> Page[SavedImageView]:
    """Your saved images, newest first, a page at a time."""
    return saved_images.list_saved(p, actor, limit, offset)


@router.delete("/saved-images/{image_id}", response_model=SavedImageView,
               openapi_extra=access(*ORDERING, owned=True))
def delete(image_id: str, p: PlatformDep, actor: PrincipalDep) -> SavedImageView:
    """Delete a saved image: no later order may name it (containers from it go on)."""
    return saved_images.delete(p, actor, image_id)
