"""The BMC's own word on the hardware, read on a schedule for every node that is rented or
in a pipeline (GPULEASE_BMC_LOG_INTERVAL_S): the health rollup and the entries of its log
services. A new critical entry about a GPU, memory, a power supply or temperature
(domain/bmc_events.py) opens a hardware alert with source `bmc`, carrying the BMC's own
message: evidence from the platform's side, which the tenant (root on the host) cannot
forge. The alerts stay open until the BMC's health rollup is OK again. The BMC is read
outside any transaction; a BMC that cannot be read is tried again at the next interval."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from sqlalchemy import select

from gpulease.db.tables import HardwareAlert, Node
from gpulease.domain.bmc_events import classify, cursor, gpu_index, new_entries
from gpulease.domain.states import NodeStatus
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcError, BmcLog
from gpulease.services.history import note, record_event

log = logging.getLogger("gpulease.bmc")
ACTOR = "sweep:bmc-logs"
WATCHED = (NodeStatus.ACTIVE.value, NodeStatus.DEPLOYING.value, NodeStatus.CLEANING.value)


def check_bmc_logs(p: Platform, limit: int = 50) -> int:
    """Read the BMCs that are due; returns how many alerts were opened."""
    now = p.clock.now()
    due_before = now - timedelta(seconds=p.settings.bmc_log_interval_s)
    with p.db.read() as s:
        due = s.execute(select(Node.id, Node.name, Node.bmc_driver, Node.bmc_address,
                               Node.bmc_username, Node.bmc_password_enc)
                        .where(Node.status.in_(WATCHED),
                               (Node.bmc_checked_at.is_(None))
                               | (Node.bmc_checked_at <= due_before))
                        .order_by(Node.bmc_checked_at.is_not(None), Node.bmc_checked_at)
                        .limit(limit)).all()
    opened = 0
    for node_id, name, driver, address, user, sealed in due:
        bmc = p.drivers.bmc_for(driver, BmcEndpoint(name, address, user, p.box.open(sealed)))
        try:
            read: BmcLog | None = bmc.event_log()
        except BmcError as exc:
            log.warning("node %s: BMC log unreadable: %s", name, exc)
            read = None
        opened += _record(p, node_id, read)
    return opened


def _record(p: Platform, node_id: str, read: BmcLog | None) -> int:
    now = p.clock.now()
    opened = 0
    with p.db.write() as s:
        node = s.get(Node, node_id, with_for_update=True)
        if node is None:
            return 0
        node.bmc_checked_at = now
        if read is None:
            return 0
        seen: dict[str, str] = json.loads(node.bmc_log_seen or "{}")
        for entry in new_entries(read.entries, seen):
            fault = classify(entry)
            if fault is None:
                continue
            service = entry.service.rstrip("/").rsplit("/", 1)[-1]
            message = (f"BMC {service} {entry.created or ''}: {entry.message}"
                       + (f" ({entry.message_id})" if entry.message_id else ""))[:1000]
            s.add(HardwareAlert(node_id=node.id, instance_id=node.instance_id,
                                gpu_index=gpu_index(entry), gpu_uuid="", kind=fault.value,
                                severity="critical", message=message, opened_at=now,
                                last_seen_at=now, source="bmc"))
            record_event(s, now, "node", node.id, "bmc_alert", actor=ACTOR,
                         instance_id=node.instance_id, message=message)
            if node.instance_id:
                note(s, now, node.instance_id, "bmc_alert", message, actor=ACTOR)
            opened += 1
        node.bmc_log_seen = json.dumps(cursor(read.services, read.entries, seen),
                                       sort_keys=True)
        node.bmc_health = read.health
        healthy = (read.health or "OK") == "OK"
        for alert in s.scalars(select(HardwareAlert).where(
                HardwareAlert.node_id == node.id, HardwareAlert.source == "bmc",
                HardwareAlert.closed_at.is_(None))):
            if healthy:  # healthy again: the BMC's alerts close
                alert.closed_at = now
            else:
                alert.last_seen_at = now
    return opened
