"""The worker's periodic jobs, one table: each runs every sweep (default 5 s) in one of the
worker processes' threads at a time. Each is safe to run by several workers at once: they
claim or lock what they change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.domain.states import NODE_IN_PIPELINE
from gpulease.lifecycle.history import SWEEP_TIMEOUTS
from gpulease.platform import Platform
from gpulease.services.accounts.password_resets import deliver_reset_mails
from gpulease.services.catalog.versions import follow
from gpulease.services.fleet.bmc_health import check_bmc_logs
from gpulease.services.money.invoices.run import sweep_invoices
from gpulease.services.money.spending import sweep_spending
from gpulease.services.platform.audit import prune
from gpulease.services.platform.notify import deliver_notices
from gpulease.services.storage.backup_policy import run_schedules
from gpulease.services.storage.meter import meter_buckets
from gpulease.services.storage.quota import check_quotas
from gpulease.services.support.card_repairs import begin_due_windows
from gpulease.services.support.ticket_sla import sweep_ticket_clocks
from gpulease.services.telemetry.retention import downsample
from gpulease.worker.jobs.fleet.safe_off import safe_off
from gpulease.worker.jobs.money.leases import sweep_leases
from gpulease.worker.jobs.money.meter import meter_containers
from gpulease.worker.pipelines.base import claim_due, guarded, lock_instance_first, release_lock
from gpulease.worker.pipelines.nodes import fail_node


def sweep_timeouts(p: Platform, owner: str) -> int:
    """Fail nodes whose stage outlived its deadline (only unlocked or expired rows)."""
    now = p.clock.now()
    claims = claim_due(
        p, Node, owner, limit=50, due=False,
        extra=[Node.status.in_([st.value for st in NODE_IN_PIPELINE]),
               Node.stage_deadline < now],
    )
    for claim in claims:
        with p.db.write() as s:
            lock_instance_first(s, s.scalar(select(Node.instance_id).where(Node.id == claim.id)))
            node: Node | None = guarded(s, Node, claim)
            if node is None:
                continue
            release_lock(node)
            timeout = p.settings.stage_timeout_s
            fail_node(s, p, node, f"stage {node.stage} timed out after {timeout:.0f} s", now,
                      actor=SWEEP_TIMEOUTS, breaker=True)
    if claims:
        p.wake()
    return len(claims)


@dataclass(frozen=True)
class Periodic:
    name: str
    run: Callable[[Platform, str], object]
    does: str


PERIODICS: tuple[Periodic, ...] = (
    Periodic("catalog", lambda p, _owner: follow(p),
             "a newly published catalog (`gpulease catalog reload`) swapped in"),
    Periodic("timeouts", sweep_timeouts, "fail nodes whose stage outlived its deadline"),
    Periodic("safe-off", lambda p, _owner: safe_off(p),
             "a node whose stage failed: media ejected, boot override cleared, power off"),
    Periodic("bmc-logs", lambda p, _owner: check_bmc_logs(p),
             "the BMC's health and logs of rented and deploying nodes: critical GPU, memory, "
             "PSU and thermal entries become hardware alerts"),
    Periodic("leases", lambda p, _owner: sweep_leases(p),
             "reminders, automatic renewals, grace, release and erase after grace"),
    Periodic("backup-schedule", lambda p, _owner: run_schedules(p),
             "tenants' scheduled backups of their servers' data disks queued when due"),
    Periodic("storage-meter", lambda p, _owner: meter_buckets(p),
             "each tenant's bucket measured once a day: GB-days beyond the free allowance "
             "charged, its admins told at 80 % and 100 % of the quota"),
    Periodic("storage-quota", lambda p, _owner: check_quotas(p),
             "each bucket measured every GPULEASE_STORAGE_QUOTA_CHECK_S: past its quota the "
             "store refuses its tenant's writes (reads and deletes go on), under it again "
             "they may write"),
    Periodic("meter", lambda p, _owner: meter_containers(p),
             "each started container GPU-hour, charged once; unpaid containers released"),
    Periodic("spending", lambda p, _owner: sweep_spending(p),
             "overdraft warnings, suspension after grace (containers stopped, bare metal "
             "flagged), low-balance warnings, reminders of unpaid invoices"),
    Periodic("invoices", lambda p, _owner: sweep_invoices(p),
             "the month's invoices: drafted on the 1st, final on the finalize day"),
    Periodic("notices", lambda p, _owner: deliver_notices(p),
             "lease reminders and money notices by e-mail and signed webhook"),
    Periodic("password-resets", lambda p, _owner: deliver_reset_mails(p),
             "password reset links by e-mail, each once"),
    Periodic("tickets", lambda p, _owner: sweep_ticket_clocks(p),
             "operators warned of tickets' SLA clocks at risk, breaches escalated (once per "
             "clock each)"),
    Periodic("repair-windows", lambda p, _owner: begin_due_windows(p),
             "card repairs whose accepted window has begun: the node out for repair, still "
             "its tenant's, powered off"),
    Periodic("telemetry", lambda p, _owner: downsample(p),
             "GPU summaries past GPULEASE_TELEMETRY_MINUTE_DAYS merged per GPU and hour; "
             "hourly ones past GPULEASE_TELEMETRY_HOUR_DAYS deleted"),
    Periodic("audit", lambda p, _owner: prune(p),
             "audit rows past GPULEASE_AUDIT_RETENTION_DAYS pruned from the chain's start"),
)
