"""The outbox delivered: e-mail and signed webhooks (services/platform/notify.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.platform.notify import deliver_notices
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return deliver_notices(p)


JOB = Job("notices", run, "lease reminders and money notices by e-mail and signed webhook")
