"""The budget sweep: each tenant with a monthly budget is told when its month's spend
reaches 50, 80 and 100 % of it, once each a month (services/money/budgets.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.money.budgets import notice_budgets
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return notice_budgets(p)


JOB = Job("budgets", run,
          "tenants' monthly budgets: 50, 80 and 100 % of the month's spend told once each "
          "(webhook events billing.budget_50, _80, _100)")
