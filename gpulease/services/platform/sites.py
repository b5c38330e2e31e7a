"""Sites: which data centre's servers a worker serves, and whether each site has a worker.

Each region belongs to a site (catalog `[[sites]]`; a region without one is a site of its
own). A worker started with `--site NAME` (GPULEASE_WORKER_SITE) claims only the work that
touches that site's servers: node steps, instance steps (containers on the site's hosts),
backup runs and image saves, and the BMC reads of the periodic jobs. A worker without a
site serves every site that has never had a worker of its own, so a single-site install
changes nothing; once a site has had one (`gpulease workers --stopped` lists it), only its
own workers serve it, since a worker elsewhere cannot reach its management network. When
none of them is alive, orders for its regions are refused with the reason (503, nothing
held); `gpulease_site_live_workers` gives each site's live workers, and the shipped rule
GpuleaseSiteWithoutWorker fires for a site at 0 while other workers run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from gpulease.db.tables import WorkerProcess
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import CatalogError
from gpulease.domain.phrases import Phrase, phrase
from gpulease.kept import Key
from gpulease.ports.records import Keeping, Priced, Records
from gpulease.schemas import SiteView
from gpulease.services.platform.workers import live_after


@dataclass(frozen=True)
class Scope:
    """The regions a worker serves: those of its own site (`only`), or, for a worker
    without a site, every region but those of sites that have workers of their own
    (`but`)."""

    site: str | None
    only: frozenset[str] | None = None
    but: frozenset[str] = field(default_factory=frozenset)

    def covers(self, region: Any) -> ColumnElement[bool] | None:
        """The condition on a row's `region` column (None: every region)."""
        column: ColumnElement[str] = region
        if self.only is not None:
            return column.in_(sorted(self.only)) if self.only else column.is_(None)
        return column.not_in(sorted(self.but)) if self.but else None


EVERYWHERE = Scope(None)


@dataclass(frozen=True)
class SiteWorkers:
    """What the registry says of the sites: those that have had a worker of their own
    (`staffed`), and the live workers per site (None: those without a site)."""

    staffed: frozenset[str]
    live: dict[str | None, int]

    def serving(self, site: str) -> int:
        """How many live workers serve `site` now."""
        return self.live.get(site, 0) if site in self.staffed else self.live.get(None, 0)


def site_workers(s: Session, now: datetime, p: Records) -> SiteWorkers:
    staffed = frozenset(site for site in s.scalars(select(WorkerProcess.site).distinct())
                        if site is not None)
    live: dict[str | None, int] = {site: count for site, count in s.execute(
        select(WorkerProcess.site, func.count()).where(
            WorkerProcess.stopped_at.is_(None), WorkerProcess.seen_at > live_after(p, now))
        .group_by(WorkerProcess.site))}
    return SiteWorkers(staffed, live)


def check_site(p: Priced, site: str | None) -> None:
    """A worker's `--site` must name a site of the catalog."""
    if site is not None and site not in p.catalog.regions_by_site:
        known = ", ".join(sorted(p.catalog.regions_by_site)) or "none"
        raise CatalogError(f"unknown site {site!r}: the catalog's sites are {known} "
                         "([[sites]] and each region's `site`)")


def scope_of(p: Priced, site: str | None) -> Scope:
    """What a worker of `site` (None: without one) serves now."""
    regions = p.catalog.regions_by_site
    if site is not None:
        return Scope(site, only=frozenset(regions.get(site, ())))
    with p.db.read() as s:
        staffed = site_workers(s, p.clock.now(), p).staffed
    return Scope(None, but=frozenset(r for x in staffed for r in regions.get(x, ())))


class _Looked:
    """The registry as an order last looked at it (kept by the process for a second, so
    an order costs no extra statements in a burst)."""

    def __init__(self) -> None:
        self.at: datetime | None = None
        self.workers = SiteWorkers(frozenset(), {})


LOOKED = Key[_Looked]("site-workers")
LOOK_AGAIN_S = 1.0


def _workers_now(p: Keeping) -> SiteWorkers:
    looked = p.kept.made(LOOKED, _Looked)
    now = p.clock.now()
    if looked.at is None or abs((now - looked.at).total_seconds()) >= LOOK_AGAIN_S:
        with p.db.read() as s:
            looked.workers = site_workers(s, now, p)
        looked.at = now
    return looked.workers


def unserved(p: Keeping, region: str) -> Phrase | None:
    """Why no worker would take up work in `region` now, or None when one would: a site
    that has workers of its own and none alive (as the registry was at most a second ago).
    A site served by the workers without a site is never refused: with none alive,
    GpuleaseNoWorker says so and the order waits, as on a single-site install."""
    site = p.catalog.site_of(region)
    workers = _workers_now(p)
    if site not in workers.staffed or workers.serving(site):
        return None
    return phrase("No worker of site {site} is running, so nothing in {region} can be "
                  "deployed now; the operator has been alerted. Retry later or order in "
                  "another region.", site=site, region=region)


def live_by_site(p: Priced) -> dict[str, int]:
    """Each site's live workers (its own, or for a site without any, those without a
    site): the `gpulease_site_live_workers` gauge and `gpulease workers`."""
    with p.db.read() as s:
        workers = site_workers(s, p.clock.now(), p)
    return {site: workers.serving(site) for site in p.catalog.regions_by_site}


def list_sites(p: Priced, actor: Principal) -> list[SiteView]:
    """Operator: each site, its regions and the live workers that serve it."""
    actor.require_operator()
    with p.db.read() as s:
        workers = site_workers(s, p.clock.now(), p)
    declared = {site.id: site for site in p.catalog.sites}
    views = []
    for site, regions in p.catalog.regions_by_site.items():
        known = declared.get(site)
        region = p.catalog.region_by_id[regions[0]] if regions else None
        views.append(SiteView(
            id=site, regions=list(regions),
            name_zh=known.name_zh if known else region.name_zh if region else site,
            name_en=known.name_en if known else region.name_en if region else site,
            own_workers=site in workers.staffed, live_workers=workers.serving(site),
            served=site not in workers.staffed or workers.serving(site) > 0))
    return views


def media_base(p: Priced, region: str) -> str:
    """Where a server of `region` fetches its images and ramdisk: its site's media server
    (catalog `[[sites]] media_base_url`), else GPULEASE_MEDIA_BASE_URL."""
    return (p.catalog.media_base_url_of(region) or p.settings.media_base_url).rstrip("/")
