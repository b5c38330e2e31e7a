"""The BMC log sweep: the BMCs of rented and deploying nodes that are due (each every
GPULEASE_BMC_LOG_INTERVAL_S, or GPULEASE_BMC_LOG_INTERVAL_SUBSCRIBED_S once it pushes its
alerts) are asked for their health and logs, and subscribed to push when not asked yet
(services/fleet/bmc_health.py). BMCs are slow (0.3-2 s a request, a 10 s timeout), so they
are asked GPULEASE_JOB_IO_CONCURRENCY at a time for at most GPULEASE_JOB_BUDGET_S; the rest
wait for the next run, and on its own thread this never delays a stage timeout."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcError, BmcLog
from gpulease.services.fleet.bmc_health import WATCHED, keep_subscribed, record_log
from gpulease.services.platform.sites import EVERYWHERE, Scope
from gpulease.worker.jobs.job import Job, fan_out

log = logging.getLogger("gpulease.bmc")


def check_bmc_logs(p: Platform, limit: int = 50, scope: Scope = EVERYWHERE) -> int:
    """Read the BMCs that are due in the regions of `scope` (subscribing those not asked
    yet); returns how many alerts were opened."""
    now = p.clock.now()
    polled_before = now - timedelta(seconds=p.settings.bmc_log_interval_s)
    pushed_before = now - timedelta(seconds=p.settings.bmc_log_interval_subscribed_s)
    subscribed = Node.bmc_subscription.is_not(None) & (Node.bmc_subscription != "")
    here = scope.covers(Node.region)
    with p.db.read() as s:
        due = s.execute(select(Node.id, Node.name, Node.bmc_driver, Node.bmc_address,
                               Node.bmc_username, Node.bmc_password_enc,
                               Node.bmc_subscription, Node.bmc_log_seen)
                        .where(Node.status.in_(WATCHED),
                               (Node.bmc_checked_at.is_(None))
                               | (~subscribed & (Node.bmc_checked_at <= polled_before))
                               | (subscribed & (Node.bmc_checked_at <= pushed_before)),
                               *([] if here is None else [here]))
                        .order_by(Node.bmc_checked_at.is_not(None), Node.bmc_checked_at)
                        .limit(limit)).all()
    opened = fan_out([tuple(row) for row in due], lambda row: _check(p, row),
                     concurrency=p.settings.job_io_concurrency,
                     budget_s=p.settings.job_budget_s)
    return sum(opened)


def _check(p: Platform, row: tuple[Any, ...]) -> int:
    node_id, name, driver, address, user, sealed, subscription, seen = row
    bmc = p.drivers.bmc_for(driver, BmcEndpoint(name, address, user, p.box.open(sealed)))
    if p.settings.bmc_events:
        keep_subscribed(p, bmc, node_id, name, subscription)
    try:
        # the entries read before are not asked for again (the cursor record_log keeps)
        read: BmcLog | None = bmc.event_log(json.loads(seen or "{}"))
    except BmcError as exc:
        log.warning("node %s: BMC log unreadable: %s", name, exc)
        read = None
    return record_log(p, node_id, read)


JOB = Job("bmc-logs", lambda p, _owner: check_bmc_logs(p),
          "the BMC's health and logs of rented and deploying nodes: critical GPU, memory, "
          "PSU and thermal entries become hardware alerts (GPULEASE_JOB_IO_CONCURRENCY BMCs "
          "at a time, for at most GPULEASE_JOB_BUDGET_S; the worker's site only)",
          at_site=lambda p, scope: check_bmc_logs(p, scope=scope))
