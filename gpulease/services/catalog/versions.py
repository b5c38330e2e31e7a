"""One catalog for every process, published through the database. `gpulease catalog
reload` (POST /api/v1/catalog/reload) validates a catalog (the server's file, or a TOML
text sent) and stores it as a new version; each API and worker process looks for a newer
version every GPULEASE_CATALOG_FOLLOW_S and swaps its catalog in, so a price change needs
no restart and no two processes price from different versions for longer than that.

At start a process adopts the newest version. With none yet it publishes its file; with
one whose text differs from its file it follows the database and says so (`up`, which owns
its embedded database, publishes its file instead)."""

from __future__ import annotations

import hashlib
import logging

from sqlalchemy import select
from sqlalchemy import text as sql

from gpulease.db.tables import CatalogVersion
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import CatalogError, catalog_from_text, read_catalog_text
from gpulease.domain.errors import InvalidInput
from gpulease.lifecycle.history import by
from gpulease.platform import Platform
from gpulease.ports.records import Priced, Records
from gpulease.schemas.fleet import CatalogVersionView

log = logging.getLogger("gpulease.catalog")


PUBLISH_LOCK_KEY = 0x67706361  # "gpca": publishing a catalog version


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _view(row: CatalogVersion, p: Priced) -> CatalogVersionView:
    return CatalogVersionView(id=row.id, digest=row.digest, source=row.source,
                              published_at=row.published_at, published_by=row.published_by,
                              this_process=p.catalog_version)


def _latest(p: Records) -> CatalogVersion | None:
    with p.db.read() as s:
        row = s.scalar(select(CatalogVersion).order_by(CatalogVersion.id.desc()).limit(1))
        if row is not None:
            s.expunge(row)
        return row


def _store(p: Records, text: str, source: str, actor: str) -> CatalogVersion:
    """A new version unless the newest one has this text already."""
    with p.db.write() as s:
        if p.db.dialect == "postgresql":  # two processes starting on an empty table: a row
            # lock finds nothing to lock, so they take turns on this key instead
            s.execute(sql("SELECT pg_advisory_xact_lock(:key)"), {"key": PUBLISH_LOCK_KEY})
        latest = s.scalar(select(CatalogVersion).order_by(CatalogVersion.id.desc()).limit(1)
                          .with_for_update())
        if latest is not None and latest.digest == digest(text):
            s.expunge(latest)
            return latest
        row = CatalogVersion(digest=digest(text), text=text, source=source[:500],
                             published_at=p.clock.now(), published_by=actor[:64])
        s.add(row)
        s.flush()
        s.expunge(row)
        return row


def publish(p: Platform, actor: Principal, text: str | None = None) -> CatalogVersionView:
    """Validate and publish: the TOML `text` sent, else this process's catalog file. A
    catalog with an error is refused in one line (file, entry, field); nothing changes."""
    actor.require_operator()
    source = "uploaded" if text is not None else str(p.settings.catalog_file or "built-in")
    try:
        if text is None:
            text = read_catalog_text(p.settings.catalog_file)
        catalog = catalog_from_text(text, source)
    except CatalogError as exc:
        raise InvalidInput("catalog", str(exc)) from None
    row = _store(p, text, source, by(actor))
    p.catalog, p.catalog_version = catalog, row.id
    log.info("catalog version %s published from %s by %s", row.id, source, by(actor))
    p.wake()
    return _view(row, p)


def follow(p: Platform) -> bool:
    """Swap in the newest published catalog when it is newer than this process's; True if
    so. Only forward: a look that began before this process published (or adopted) a newer
    version must not put the older one back."""
    latest = _latest(p)
    if latest is None or latest.id <= (p.catalog_version or 0):
        return False
    try:
        newer = catalog_from_text(latest.text, f"catalog version {latest.id}")
    except CatalogError as exc:  # published by a newer release this one cannot read
        log.error("cannot use catalog version %s: %s", latest.id, exc)
        return False
    if latest.id <= (p.catalog_version or 0):  # published here while this one was read
        return False
    p.catalog = newer
    log.info("catalog version %s in force (published by %s from %s)", latest.id,
             latest.published_by, latest.source)
    p.catalog_version = latest.id
    return True


def adopt(p: Platform, publish_file: bool = False) -> None:
    """At start: the newest version, or this process's file (see the module's docstring)."""
    text = read_catalog_text(p.settings.catalog_file)
    latest = _latest(p)
    if latest is None or (publish_file and latest.digest != digest(text)):
        row = _store(p, text, str(p.settings.catalog_file or "built-in"), "start")
        p.catalog_version = row.id
        return
    if latest.digest != digest(text):
        log.warning("the catalog file %s differs from published catalog version %s (%s, "
                    "%s): pricing from version %s; `gpulease catalog reload` publishes the "
                    "file", p.settings.catalog_file or "built-in", latest.id,
                    latest.published_at.isoformat(timespec="seconds"), latest.source,
                    latest.id)
        follow(p)
    else:
        p.catalog_version = latest.id


def current(p: Priced) -> CatalogVersionView | None:
    latest = _latest(p)
    return _view(latest, p) if latest is not None else None


def current_text(p: Records, actor: Principal) -> str:
    """Operator: the TOML the platform prices from (the newest published version, else the
    catalog file), to edit and publish again."""
    actor.require_operator()
    row = _latest(p)
    return row.text if row is not None else read_catalog_text(p.settings.catalog_file)
