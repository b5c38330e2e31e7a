"""The idle sweep: a tenant whose delivered instance's GPUs sat idle most of the last day
is told so, once a day (services/telemetry/idle.py)."""

from __future__ import annotations

from datetime import timedelta

from gpulease.platform import Platform
from gpulease.services.telemetry.idle import notice_idle
from gpulease.worker.jobs.job import Job

EVERY = timedelta(minutes=10)


def run(p: Platform, _owner: str) -> object:
    return notice_idle(p)


JOB = Job("idle", run,
          "delivered instances whose GPUs were idle GPULEASE_IDLE_NOTICE_SHARE of the last "
          "day (utilisation under GPULEASE_IDLE_UTIL_PCT): the tenant told once a day "
          "(webhook event instance.idle)",
          every_s=lambda _settings: EVERY.total_seconds())
