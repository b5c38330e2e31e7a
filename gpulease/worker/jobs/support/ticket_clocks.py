"""Tickets' SLA clocks watched (services/support/ticket_sla.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.support.ticket_sla import sweep_ticket_clocks
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> object:
    return sweep_ticket_clocks(p)


JOB = Job("tickets", run,
          "operators warned of tickets' SLA clocks at risk, breaches escalated (once per "
          "clock each)")
