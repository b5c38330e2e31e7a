"""The power-actions pipeline: a tenant's reboot, power cycle or restart
(services/instances/power.py asks for it) is claimed by the worker of the instance's site
and sent, outside any transaction and through the fence, to each server's BMC (Redfish's
GracefulRestart or ForceRestart) or to the container's engine; then done or failed. A server
already reached is not sent it again when another is retried after a transient error; a
worker lost while sending leaves the action failed rather than reset a server twice."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from gpulease.db.claims import Claim, begin_step, guarded, release
from gpulease.db.ops_tables import PowerAction
from gpulease.db.tables import Instance, Node
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import (
    POWER_ACTION,
    InstanceStatus,
    NodeStatus,
    PowerActionStatus,
    PowerKind,
)
from gpulease.lifecycle.history import WORKER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcError, BmcPermanentError
from gpulease.ports.runtime import RuntimeError_
from gpulease.services.instances.power import servers_of
from gpulease.worker.pipelines.base import Pipeline, backoff
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_bmc, fenced_runtime

log = logging.getLogger("gpulease.power")
ATTEMPTS = 5  # sends of a transiently failing action before it fails
RESET = {PowerKind.REBOOT.value: "GracefulRestart", PowerKind.POWER_CYCLE.value: "ForceRestart"}


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [PowerAction.status == PowerActionStatus.QUEUED.value,
            or_(PowerAction.next_attempt_at.is_(None), PowerAction.next_attempt_at <= now)]


def _pending(now: datetime) -> ColumnElement[bool]:
    """Queued, and held by no worker (a held one is its holder's to finish)."""
    return and_(PowerAction.status == PowerActionStatus.QUEUED.value,
                or_(PowerAction.lock_expires_at.is_(None), PowerAction.lock_expires_at < now))


def step_power(p: Platform, held: Claim) -> None:
    with p.db.write() as s:
        row = guarded(s, PowerAction, held)
        if row is None or row.status != PowerActionStatus.QUEUED.value:
            return
        if held.taken_over:  # the last holder died sending: was it sent? Not again.
            _close(s, p, row, phrase("the worker sending it was lost; check the server "
                                     "and ask again if it did not restart"))
            return
        kind, instance_id = row.kind, row.instance_id
        sent = set(filter(None, row.sent_to.splitlines()))
        inst = s.get(Instance, instance_id)
        if inst is None or inst.status != InstanceStatus.READY.value:
            _close(s, p, row, phrase("the instance is no longer ready"))
            return
        servers = servers_of(s, inst, row.node_name)
        begin_step(row, "power")
    fence = Fence(p, held)
    ssh_port: int | None = None
    try:
        for node in servers:
            if node.name in sent:
                continue
            if kind == PowerKind.RESTART.value:
                ssh_port = fenced_runtime(p.drivers.runtime_for(node.runtime_url),
                                          fence).restart(instance_id, node.name,
                                                         node.runtime_url).ssh_port
            elif node.status != NodeStatus.ACTIVE.value:
                raise BmcPermanentError(f"server {node.name} is {node.status} now")
            else:
                _reset(p, fence, node, kind)
            sent.add(node.name)
    except Fenced:
        return  # taken over while this worker was away: the new holder decides
    except (BmcError, RuntimeError_) as exc:
        _failed_send(p, held, exc, sent)
        return
    _finish(p, held, None, sent, ssh_port)


def _reset(p: Platform, fence: Fence, node: Node, kind: str) -> None:
    bmc = fenced_bmc(p.drivers.bmc_for(node.bmc_driver, BmcEndpoint(
        node.name, node.bmc_address, node.bmc_username, p.box.open(node.bmc_password_enc))),
        fence)
    if kind == PowerKind.REBOOT.value:
        bmc.graceful_restart()
    else:
        bmc.force_restart()


def _failed_send(p: Platform, held: Claim, exc: BmcError | RuntimeError_,
                 sent: set[str]) -> None:
    """A transient error is sent again later (up to ATTEMPTS); anything else fails it."""
    retryable = bool(getattr(exc, "retryable", False))
    with p.db.write() as s:
        row = guarded(s, PowerAction, held)
        if row is None:
            return
        row.attempts += 1
        row.sent_to = "\n".join(sorted(sent))
        if retryable and row.attempts < ATTEMPTS:
            wait = getattr(exc, "retry_after_s", None) or backoff(p, row.attempts)
            row.next_attempt_at = p.clock.now() + timedelta(seconds=wait)
            row.last_error = str(exc)[:1000]
            release(row)
            log.warning("power action %s: %s; again in %.0f s", held.id, exc, wait)
            return
        _close(s, p, row, phrase("{error}", error=str(exc)[:900]))


def _finish(p: Platform, held: Claim, failure: Phrase | None, sent: set[str],
            ssh_port: int | None = None) -> None:
    """Closed with the servers it reached; a restarted container's SSH port, where its
    engine published it anew, is the instance's from now on (and said)."""
    with p.db.write() as s:
        inst = s.scalar(select(Instance).where(Instance.id == select(PowerAction.instance_id)
                                               .where(PowerAction.id == held.id)
                                               .scalar_subquery())
                        .with_for_update())  # the instance first: the lock order
        row = guarded(s, PowerAction, held)
        if row is None or row.status != PowerActionStatus.QUEUED.value:
            return
        row.sent_to = "\n".join(sorted(sent))
        if ssh_port is not None and inst is not None and inst.ssh_port != ssh_port:
            inst.ssh_port = ssh_port
            note(s, p.clock.now(), inst.id, "power", phrase(
                "SSH now answers on port {port}", port=ssh_port), actor=WORKER)
        _close(s, p, row, failure)


def _close(s: Session, p: Platform, row: PowerAction, failure: Phrase | None) -> None:
    """Done (every server reached) or failed with `failure`; said in the instance's
    history with the servers it reached."""
    now = p.clock.now()
    release(row)
    row.next_attempt_at, row.finished_at = None, now
    reached = ", ".join(sorted(filter(None, row.sent_to.splitlines())))
    if failure is None:
        transition(s, p, row, POWER_ACTION, "done", Move(now, actor=WORKER, reason=phrase(
            "{action}: {what} accepted by {servers}", action=Phrase(row.kind),
            what=RESET.get(row.kind, "restart"), servers=reached)))
        return
    if reached:
        failure = phrase("{failure} (already sent to {servers})", failure=failure,
                         servers=reached)
    transition(s, p, row, POWER_ACTION, "fail", Move(now, actor=WORKER, reason=failure))


PIPELINE = Pipeline("power-actions", PowerAction, _due, _pending, step_power,
                    region=PowerAction.region)
