"""Saved environments: a tenant's running container instance saved as an image in the
platform's registry (`gpulease image save INSTANCE --name N`), private to its tenant —
only the platform pushes and pulls, and only the tenant's own orders name it
(`--image my/N`, the newest save of that name). The worker commits the container on its
host's engine and pushes it (domain/states.SAVED_IMAGE); the data volume stays out of it."""

from __future__ import annotations

import logging
import re

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import SavedImage
from gpulease.db.repositories import get_instance, instance_allocations
from gpulease.db.tables import Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.phrases import phrase
from gpulease.domain.states import SAVED_IMAGE, InstanceStatus, SavedImageStatus
from gpulease.lifecycle.history import by, note
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves, Records
from gpulease.schemas import Page
from gpulease.schemas.fleet import SavedImageView
from gpulease.security import new_id

log = logging.getLogger("gpulease.images")
PREFIX = "my/"  # how an order names a saved image
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
REPOSITORY = "gpulease-saved"  # registry/gpulease-saved/<tenant>/<name>:<tag>
RETRY_AFTER_S = 60.0


def _view(row: SavedImage) -> SavedImageView:
    return SavedImageView(id=row.id, name=row.name, order_as=f"{PREFIX}{row.name}",
                          source_instance_id=row.source_instance_id,
                          base_image_id=row.base_image_id, digest=row.digest,
                          size_bytes=row.size_bytes, status=row.status,
                          status_reason=row.status_reason, created_at=row.created_at,
                          saved_at=row.saved_at)


def _registry(p: Records, engine_url: str | None) -> str:
    if engine_url and not p.settings.registry:
        raise Conflict("This platform has no registry for saved images: the provider sets "
                       "GPULEASE_REGISTRY (docs/operations.md, Saved environments).")
    return p.settings.registry or "simulated.invalid"


def save(p: Records, actor: Principal, instance_id: str, name: str) -> SavedImageView:
    """Queue the save of a running container instance under `name` (a new version when
    the name was saved before)."""
    tenant = actor.require_order_rights()
    if not NAME.match(name):
        raise InvalidInput("name", "{name!r} is not an image name: lower-case letters, "
                           "digits, '.', '_' and '-', starting with a letter or digit, at "
                           "most 63 characters (e.g. torch-env).", name=name)
    now = p.clock.now()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        if inst.kind != "container":
            raise Conflict("{instance} is bare metal: a server's system is not saved as "
                           "an image; ask your provider for a custom image, or back its "
                           "data disk up with `gpulease backup`.", instance=inst.id)
        if inst.status != InstanceStatus.READY.value:
            raise Conflict("Instance {instance} is {status}; only a running container "
                           "is saved.", instance=inst.id, status=inst.status)
        busy = s.scalar(select(SavedImage.id).where(
            SavedImage.source_instance_id == inst.id,
            SavedImage.status == SavedImageStatus.SAVING.value))
        if busy:
            raise Conflict("{busy} of {instance} is still being saved; `gpulease image "
                           "saved` shows it.", busy=busy, instance=inst.id)
        (node, _gpus, _held), = instance_allocations(s, inst.id)
        registry = _registry(p, node.runtime_url)
        tag = now.strftime("%Y%m%d-%H%M%S")
        row = SavedImage(id=new_id("img"), tenant_id=tenant, name=name,
                         source_instance_id=inst.id,
                         base_image_id=_base_of(s, inst),
                         reference=f"{registry}/{REPOSITORY}/{tenant.lower()}/{name}:{tag}",
                         created_at=now, created_by=by(actor),
                         **initial(SavedImage, SAVED_IMAGE))
        s.add(row)
        s.flush()
        note(s, now, inst.id, "image_save", phrase("saving as {prefix}{name}", prefix=PREFIX,
        name=name), actor=by(actor))
        view = _view(row)
    p.wake()
    return view


def _base_of(s: Session, inst: Instance) -> str:
    """The catalog image under the container (through earlier saves)."""
    if inst.saved_image_id:
        parent = s.get(SavedImage, inst.saved_image_id)
        if parent is not None:
            return parent.base_image_id
    return inst.image_id


def list_saved(p: Records, actor: Principal, limit: int = 100, offset: int = 0
               ) -> Page[SavedImageView]:
    """The tenant's saved images, newest first (deleted ones left out), a page at a
    time."""
    tenant = actor.require_tenant()
    with p.db.read() as s:
        q = select(SavedImage).where(SavedImage.tenant_id == tenant,
                                     SavedImage.status != SavedImageStatus.DELETED.value)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(SavedImage.created_at.desc(), SavedImage.id.desc())
                         .limit(limit).offset(offset))
        return Page(items=[_view(r) for r in rows], total=total, limit=limit, offset=offset)


def delete(p: Moves, actor: Principal, image_id: str) -> SavedImageView:
    """Delete a saved image: later orders cannot name it (containers running from it go
    on); its manifest is deleted from the registry, whose garbage collection frees the
    layers no other image uses (docs/operations.md)."""
    actor.require_order_rights()
    tenant = actor.require_tenant()
    with p.db.write() as s:
        row = s.scalar(select(SavedImage).where(SavedImage.id == image_id,
                                                SavedImage.tenant_id == tenant)
                       .with_for_update())
        if row is None or row.status == SavedImageStatus.DELETED.value:
            raise NotFound("No saved image {image_id} in your account; `gpulease image "
                           "saved` lists them.", image_id=image_id)
        if row.status == SavedImageStatus.SAVING.value:
            raise Conflict("{image_id} is still being saved; delete it once it is done.",
                           image_id=image_id)
        transition(s, p, row, SAVED_IMAGE, "delete", Move(p.clock.now(), actor=by(actor)))
        view, reference, digest = _view(row), row.reference, row.digest
    if digest and p.settings.registry and reference.startswith(p.settings.registry + "/"):
        _delete_manifest(reference, digest)
    return view


def _delete_manifest(reference: str, digest: str) -> None:
    """The registry's API (distribution v2; its storage must allow deletes)."""
    registry, _, rest = reference.partition("/")
    repository = rest.rpartition(":")[0]
    try:
        r = httpx.delete(f"http://{registry}/v2/{repository}/manifests/{digest}", timeout=10)
        if r.status_code not in (202, 404):
            log.warning("registry kept %s@%s: %s %s", repository, digest, r.status_code,
                        r.text[:200])
    except httpx.HTTPError as exc:
        log.warning("registry unreachable, %s@%s kept: %s", repository, digest, exc)


def for_order(s: Session, tenant: str, ref: str) -> SavedImage:
    """The newest ready save of `my/NAME` among the tenant's images."""
    name = ref.removeprefix(PREFIX)
    row = s.scalar(select(SavedImage).where(
        SavedImage.tenant_id == tenant, SavedImage.name == name,
        SavedImage.status == SavedImageStatus.READY.value)
        .order_by(SavedImage.saved_at.desc(), SavedImage.id.desc()).limit(1))
    if row is None:
        raise InvalidInput("image", "No saved image {ref!r} of yours is ready; `gpulease "
                           "image saved` lists them (order as my/NAME).", ref=ref)
    return row


def reference_of(s: Session, inst: Instance) -> str | None:
    """What a container instance starts from when it was ordered from a saved image."""
    if not inst.saved_image_id:
        return None
    row = s.get(SavedImage, inst.saved_image_id)
    return row.reference if row is not None else None
