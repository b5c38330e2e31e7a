"""A newly published catalog swapped in (services/catalog/versions.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.catalog.versions import follow
from gpulease.settings import Settings
from gpulease.worker.jobs.job import Job


def _every(settings: Settings) -> float:
    return settings.catalog_follow_s


def run(p: Platform, _owner: str) -> bool:
    return follow(p)


JOB = Job("catalog", run, "a newly published catalog (`gpulease catalog reload`) swapped in",
          every_s=_every)
