"""Spending bounded by the wallet, and dunning (services/money/spending.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.money.spending import sweep_spending
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return sweep_spending(p)


JOB = Job("spending", run,
          "overdraft warnings, suspension after grace (containers stopped, bare metal "
          "flagged), low-balance warnings, reminders of unpaid invoices")
