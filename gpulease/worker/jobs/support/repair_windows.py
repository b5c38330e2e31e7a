"""Card repairs begun when their accepted window opens (services/support/card_repairs.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.support.card_repairs import begin_due_windows
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return begin_due_windows(p)


JOB = Job("repair-windows", run,
          "card repairs whose accepted window has begun: the node out for repair, still "
          "its tenant's, powered off")
