"""OS images: the catalog's built-in ones and those operators add (URL + checksum)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.tables import CustomImage, Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import Image
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.states import INSTANCE_LIVE
from gpulease.ports.records import Driven, Priced
from gpulease.schemas import ImageCreate, ImageView
from gpulease.services.platform.idempotency import Idem, run_once


def _image(row: CustomImage) -> Image:
    return Image(id=row.id, name=row.name, os=row.os, gpu_vendor=row.gpu_vendor,
                 software=tuple(x for x in row.software.splitlines() if x), url=row.url,
                 checksum=row.checksum, custom=True)


def view(i: Image) -> ImageView:
    return ImageView(id=i.id, name=i.name, os=i.os, gpu_vendor=i.gpu_vendor,
                     software=list(i.software), custom=i.custom, url=i.url, checksum=i.checksum)


def all_images(s: Session, p: Priced) -> list[Image]:
    custom = [_image(r) for r in s.scalars(select(CustomImage).order_by(CustomImage.id))]
    return list(p.catalog.images) + custom


def find_image(s: Session, p: Priced, image_id: str) -> Image | None:
    if image_id in p.catalog.image_by_id:
        return p.catalog.image_by_id[image_id]
    row = s.get(CustomImage, image_id)
    return _image(row) if row else None


def list_images(p: Priced) -> list[ImageView]:
    with p.db.read() as s:
        return [view(i) for i in all_images(s, p)]


def add_image(
    p: Driven, actor: Principal, body: ImageCreate, idem: Idem | None = None
) -> ImageView:
    actor.require_operator()
    return run_once(p, actor, idem, ImageView, lambda s: _add(s, p, actor, body))[0]


def _add(s: Session, p: Priced, actor: Principal, body: ImageCreate) -> ImageView:
    if find_image(s, p, body.id) is not None:
        raise Conflict("An image {image!r} exists already; pick another id.", image=body.id)
    row = CustomImage(
        id=body.id, name=body.name, os=body.os, gpu_vendor=body.gpu_vendor,
        software="\n".join(body.software), url=body.url, checksum=body.checksum,
        created_by=actor.user_id, created_at=p.clock.now(),
    )
    s.add(row)
    return view(_image(row))


def remove_image(p: Priced, actor: Principal, image_id: str) -> None:
    actor.require_operator()
    with p.db.write() as s:
        if image_id in p.catalog.image_by_id:
            raise InvalidInput("id", "{image_id!r} is a catalog image; edit the catalog file "
                               "to remove it.", image_id=image_id)
        row = s.get(CustomImage, image_id)
        if row is None:
            raise NotFound("No custom image {image_id}; `gpulease images` lists them.",
                           image_id=image_id)
        in_use = s.scalar(select(func.count()).select_from(Instance).where(
            Instance.image_id == image_id, Instance.status.in_([st.value for st in INSTANCE_LIVE])))
        if in_use:
            raise Conflict("{in_use} live instance(s) use {image_id}; remove it after they are "
                           "released.", in_use=in_use, image_id=image_id)
        s.delete(row)
