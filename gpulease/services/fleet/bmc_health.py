"""The BMC's own word on the hardware, for every node that is rented or in a pipeline: the
health rollup and the entries of its log services, and the alerts it pushes. A new
critical entry about a GPU, memory, a power supply or temperature (domain/fleet/bmc_events.py)
opens a hardware alert with source `bmc`, carrying the BMC's own message: evidence from the
platform's side, which the tenant (root on the host) cannot forge.

Where the BMC offers a Redfish event service, it is asked once to push its alerts to
`<public_url>/api/v1/bmc-events/<node>`, each carrying a secret Context only this
subscription knows; such a node is then read on the slower schedule
(GPULEASE_BMC_LOG_INTERVAL_SUBSCRIBED_S: the health rollup, anything lost on the way, and
whether the BMC still holds the subscription — BMCs drop one whose deliveries fail). Other
nodes are read every GPULEASE_BMC_LOG_INTERVAL_S. One alert of a kind per node and GPU is
open at a time (an event pushed and then read from the SEL is one fault). The alerts stay
open until the BMC's health rollup is OK again. BMCs are asked outside any transaction; one
that cannot be read is tried again at the next interval."""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.repositories import lock_node
from gpulease.db.tables import HardwareAlert, Node
from gpulease.domain.errors import InvalidInput, Unauthorized
from gpulease.domain.fleet.bmc_events import LogEntry, classify, cursor, gpu_index, new_entries
from gpulease.domain.phrases import phrase
from gpulease.domain.states import NodeStatus
from gpulease.lifecycle.history import Happened, note, record_event
from gpulease.ports.bmc import Bmc, BmcError, BmcLog, BmcPermanentError
from gpulease.ports.records import Priced, Records
from gpulease.security import hash_token
from gpulease.services.support import tickets

log = logging.getLogger("gpulease.bmc")
ACTOR = "sweep:bmc-logs"
PUSHED = "bmc:event"
WATCHED = (NodeStatus.ACTIVE.value, NodeStatus.DEPLOYING.value, NodeStatus.CLEANING.value)
EVENTS_SERVICE = "EventService"  # pushed entries' service, beside the polled log services
MAX_EVENTS = 100  # per delivery; Redfish services send one or a few


def events_url(p: Records, node_id: str) -> str:
    """Where a node's BMC pushes its events."""
    return f"{p.settings.public_url.rstrip('/')}/api/v1/bmc-events/{node_id}"


def keep_subscribed(p: Records, bmc: Bmc, node_id: str, name: str,
                     subscription: str | None) -> None:
    """Subscribe a node whose BMC was not asked yet, or whose BMC dropped its
    subscription. A BMC that offers no event service, or refuses the subscription for
    good, is polled only (recorded as ""); a BMC that cannot be reached is asked again."""
    try:
        if subscription and bmc.subscription_alive(subscription):
            return
        if subscription == "":
            return
        context = "glbe_" + secrets.token_urlsafe(24)
        uri = bmc.subscribe_events(events_url(p, node_id), context)
    except BmcPermanentError as exc:
        log.warning("node %s: BMC refused the event subscription (polled instead): %s",
                    name, exc)
        uri, context = None, ""
    except BmcError as exc:
        log.warning("node %s: BMC event subscription not checked: %s", name, exc)
        return
    with p.db.write() as s:
        node = lock_node(s, node_id)
        if node is None:
            return
        node.bmc_subscription = uri or ""
        node.bmc_events_hash = hash_token(context) if uri else None
        said = phrase("the BMC pushes its alerts ({uri})", uri=uri) if uri else phrase(
            "the BMC offers no event subscription: its logs are polled")
        record_event(s, p.clock.now(), Happened(
            "node", node.id, "bmc_subscribed" if uri else "bmc_polled", message=said),
            actor=ACTOR)


def receive_events(p: Priced, node_id: str, payload: dict[str, Any]) -> int:
    """A delivery from a node's BMC (a Redfish Event: {"Context", "Events": [...]});
    returns how many alerts it opened. Refused unless it carries the subscription's
    Context."""
    context = payload.get("Context")
    events = payload.get("Events")
    if not isinstance(events, list):
        raise InvalidInput("Events", "A Redfish Event carries its records in \"Events\" "
                           "(a list)")
    if len(events) > MAX_EVENTS:
        raise InvalidInput("Events", "At most {max_events} event records per delivery",
                           max_events=MAX_EVENTS)
    now = p.clock.now()
    with p.db.write() as s:
        node = lock_node(s, node_id)
        expected = node.bmc_events_hash if node is not None else None
        if (node is None or not expected or not isinstance(context, str)
                or not hmac.compare_digest(hash_token(context), expected)):
            raise Unauthorized("This delivery does not carry the Context of a subscription "
                               "the platform made; events are accepted only from the BMC "
                               "it subscribed")
        node.bmc_event_at = now
        entries = [_entry(e) for e in events if isinstance(e, dict)]
        return _open_alerts(s, p, node, now, entries, actor=PUSHED)


def _entry(event: dict[str, Any]) -> LogEntry:
    origin = event.get("OriginOfCondition")
    sensor = origin.get("@odata.id") if isinstance(origin, dict) else origin
    return LogEntry(
        service=EVENTS_SERVICE, id=str(event.get("EventId") or "")[:100],
        created=_text(event.get("EventTimestamp")),
        severity=_text(event.get("MessageSeverity") or event.get("Severity")),
        message=str(event.get("Message") or "")[:2000],
        message_id=_text(event.get("MessageId")), sensor=_text(sensor))


def _text(value: Any) -> str | None:
    return str(value)[:300] if value is not None else None


def record_log(p: Priced, node_id: str, read: BmcLog | None) -> int:
    """What a read of a node's BMC found (None: it could not be read): new critical entries
    become alerts, a healthy rollup closes the BMC's open ones; returns how many opened."""
    now = p.clock.now()
    with p.db.write() as s:
        node = lock_node(s, node_id)
        if node is None:
            return 0
        node.bmc_checked_at = now
        if read is None:
            return 0
        seen: dict[str, str] = json.loads(node.bmc_log_seen or "{}")
        opened = _open_alerts(s, p, node, now, new_entries(read.entries, seen),
                              actor=ACTOR)
        node.bmc_log_seen = json.dumps(cursor(read.services, read.entries, seen),
                                       sort_keys=True)
        node.bmc_health = read.health
        healthy = (read.health or "OK") == "OK"
        for alert in _open_bmc_alerts(s, node.id):
            if healthy:  # healthy again: the BMC's alerts close
                alert.closed_at = now
                tickets.alert_cleared(s, alert, now, ACTOR)
            else:
                alert.last_seen_at = now
    return opened


def _open_bmc_alerts(s: Session, node_id: str) -> list[HardwareAlert]:
    return list(s.scalars(select(HardwareAlert).where(
        HardwareAlert.node_id == node_id, HardwareAlert.source == "bmc",
        HardwareAlert.closed_at.is_(None))))


def _open_alerts(s: Session, p: Priced, node: Node, now: datetime,
                 entries: Iterable[LogEntry], actor: str) -> int:
    """An alert per new fault; a fault already open (same kind and GPU) is seen again."""
    open_by_fault = {(a.kind, a.gpu_index): a for a in _open_bmc_alerts(s, node.id)}
    opened = 0
    for entry in entries:
        fault = classify(entry)
        if fault is None:
            continue
        gpu = gpu_index(entry)
        if (fault.value, gpu) in open_by_fault:
            open_by_fault[(fault.value, gpu)].last_seen_at = now
            continue
        service = entry.service.rstrip("/").rsplit("/", 1)[-1]
        message = (f"BMC {service} {entry.created or ''}: {entry.message}"
                   + (f" ({entry.message_id})" if entry.message_id else ""))[:1000]
        alert = HardwareAlert(node_id=node.id, instance_id=node.instance_id, gpu_index=gpu,
                              gpu_uuid="", kind=fault.value, severity="critical",
                              message=message, opened_at=now, last_seen_at=now, source="bmc")
        s.add(alert)
        s.flush()  # the ticket's evidence names it
        tickets.open_from_alert(s, p, alert, now, actor)
        open_by_fault[(fault.value, gpu)] = alert
        record_event(s, now, Happened("node", node.id, "bmc_alert", instance_id=node.instance_id,
                                      message=message), actor=actor)
        if node.instance_id:
            note(s, now, node.instance_id, "bmc_alert", message, actor=actor)
        opened += 1
    return opened
