"""The month's invoice run (services/money/invoices/run.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.money.invoices.run import sweep_invoices
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return sweep_invoices(p)


JOB = Job("invoices", run, "the month's invoices: drafted on the 1st, final on the finalize day")
