"""Where a node goes when its pipeline ends, and what that means for its instance: a deploy
done (active), a clean done (free, drained, or on to repair), a start (deploy, clean), and a
failure. A failure's handling depends on what the node was doing and for whom, one small
handler per situation in `ON_FAILURE`, chosen by `failure_situation`:

- back from a card repair: back to repair, still its tenant's;
- a failing deploy while the fleet's circuit breaker is open: held, retried later;
- delivering an order: to maintenance, the order moved to a spare or failed;
- a swap's spare: to maintenance, another spare tried or the replacement given up;
- cleaning: to maintenance, saying its disks are not certified erased;
- anything else: to maintenance.

Every status and stage moves through lifecycle/writer.py, every binding through
lifecycle/binding.py."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.claims import due_now, release
from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import (
    INSTANCE,
    INSTANCE_STAGE,
    NODE,
    NODE_STAGE,
    RETURN_ORDER,
    InstanceStage,
    InstanceStatus,
    NodeStatus,
)
from gpulease.lifecycle.binding import fence, unbind
from gpulease.lifecycle.history import WORKER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.services.fleet.deploy_breaker import deploy_succeeded, hold_failed_deploy
from gpulease.services.orders.placement import claim_replacement
from gpulease.services.support.repairs import burn_in_failed, open_repair, repair_for_fault
from gpulease.worker.pipelines.node_inputs import drop_config_drives

log = logging.getLogger("gpulease.worker")
DELIVERING = (InstanceStatus.PENDING, InstanceStatus.DEPLOYING)


def wake_instance(s: Session, instance_id: str | None, now: datetime) -> None:
    due_now(s, Instance, instance_id, now)


def start_deploy(s: Session, p: Platform, node: Node, now: datetime, actor: str) -> None:
    transition(s, p, node, NODE, "deploy", Move(now, actor=actor))
    transition(s, p, node, NODE_STAGE, "deploy", Move(now, actor=actor,
                                                      timeout_s=p.settings.stage_timeout_s))
    node.next_attempt_at = now


def start_cleaning(s: Session, p: Platform, node: Node, now: datetime, reason: str) -> None:
    """Takes the node from any worker mid-step (its guarded write then matches nothing);
    called with its instance locked."""
    release(node)
    drop_config_drives(s, node.id)
    transition(s, p, node, NODE, "clean", Move(now, actor=WORKER, reason=reason))
    transition(s, p, node, NODE_STAGE, "clean", Move(now, actor=WORKER,
                                                     timeout_s=p.settings.stage_timeout_s))
    node.next_attempt_at = now


def finish_node(s: Session, p: Platform, node: Node, now: datetime) -> None:
    """The last step is done: a deploy's node is active, a cleaned one free (or drained,
    or on to repair when it was swapped out)."""
    instance_id = node.instance_id
    drop_config_drives(s, node.id)  # installed (or cleaned): the secrets in it are spent
    transition(s, p, node, NODE_STAGE, "done", Move(now, actor=WORKER))
    node.next_attempt_at = None
    if NodeStatus(node.status) is NodeStatus.DEPLOYING:
        transition(s, p, node, NODE, "activate", Move(now, actor=WORKER))
        deploy_succeeded(s, p, node, now)
    else:
        unbind(s, node, now)
        repair = open_repair(s, node.id) or repair_for_fault(s, node, now)
        if repair is not None:  # swapped out, or a fault reported: erased, now for repair
            node.drain_requested_at = None
            transition(s, p, node, NODE, "send_to_repair", Move(now, actor=WORKER,
                       reason=phrase("in repair: {why}; the tenant's disks erased",
                                     why=repair.reason)))
        elif node.drain_requested_at is not None:
            transition(s, p, node, NODE, "drain", Move(now, actor=WORKER,
                                                       reason=phrase("drained by operator")))
        elif node.erase_due_since is not None:  # the erase certified no disk
            transition(s, p, node, NODE, "drain", Move(now, actor=WORKER, reason=phrase(
                "cleaned, but no disk was certified erased; it stays out of the pool")))
        else:
            transition(s, p, node, NODE, "free", Move(now, actor=WORKER))
    wake_instance(s, instance_id, now)


def fail_instance(s: Session, p: Platform, inst: Instance, reason: str | Phrase,
                  now: datetime, actor: str) -> None:
    """The order failed: its status and stage both say so, and the worker looks at it."""
    transition(s, p, inst, INSTANCE, "fail", Move(now, actor=actor, reason=reason))
    transition(s, p, inst, INSTANCE_STAGE, "fail", Move(now, actor=actor, reason=reason))
    inst.next_attempt_at = now


# --- a failure ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """Why a node's step failed for good, when, and who says so. `breaker`: a failure the
    deploy circuit breaker judges (a step's error or a timeout, not a hardware verdict)."""

    reason: str
    now: datetime
    actor: str = WORKER
    breaker: bool = False
    # False: what failed is what the server was given (an image whose checksum is wrong),
    # not the server: its order fails, and the server is cleaned and goes back to the pool
    node_fault: bool = True


@dataclass(frozen=True)
class Failing:
    """What a failure handler is given: the node (locked, its instance locked first), the
    instance it serves when that matters, and the failure."""

    s: Session
    p: Platform
    node: Node
    inst: Instance | None
    failure: Failure


class Situation(StrEnum):
    RETURNING = "returning"  # back from a card repair to its tenant
    HELD = "held"  # a deploy failing while the fleet's breaker is open
    DELIVERING = "delivering"  # deploying for an order not yet delivered
    ORDER_FAULT = "order_fault"  # deploying what cannot be deployed (a wrong image)
    REPLACING = "replacing"  # a spare being deployed for a swap
    CLEANING = "cleaning"  # erasing after a hand-back or a failure
    OTHER = "other"


def failure_situation(s: Session, p: Platform, node: Node, failure: Failure
                      ) -> tuple[Situation, Instance | None]:
    """What the failing node was doing, and the instance the handler needs."""
    if node.stage in RETURN_ORDER:
        return Situation.RETURNING, None
    status = NodeStatus(node.status)
    if failure.breaker and status is NodeStatus.DEPLOYING and hold_failed_deploy(
            s, p, node, failure.reason, failure.now):
        return Situation.HELD, None
    if status is NodeStatus.CLEANING:
        return Situation.CLEANING, None
    inst = s.get(Instance, node.instance_id) if node.instance_id else None
    if inst is not None and InstanceStatus(inst.status) in DELIVERING:
        return (Situation.DELIVERING if failure.node_fault else Situation.ORDER_FAULT), inst
    if inst is not None and InstanceStatus(inst.status) is InstanceStatus.READY and (
            inst.stage == InstanceStage.REPLACING.value):
        return Situation.REPLACING, inst
    return Situation.OTHER, None


def fail_node(s: Session, p: Platform, node: Node, failure: Failure) -> None:
    """A step failed for good: the node needs an operator (or its repair). What follows
    for it and its instance is `ON_FAILURE`'s handler for its situation."""
    situation, inst = failure_situation(s, p, node, failure)
    instance_id = node.instance_id
    ON_FAILURE[situation](Failing(s, p, node, inst, failure))
    if situation not in (Situation.RETURNING, Situation.HELD):
        wake_instance(s, instance_id, failure.now)


def _to_maintenance(f: Failing, said: str | Phrase | None = None) -> None:
    """Out of the pool with the reason, left safe (media out, no boot override, power off:
    jobs/fleet/safe_off.py), letting go of its instance."""
    node, now, actor = f.node, f.failure.now, f.failure.actor
    drop_config_drives(f.s, node.id)
    if node.stage is not None:
        transition(f.s, f.p, node, NODE_STAGE, "abort", Move(now, actor=actor))
        node.safe_off_due = True
    node.next_attempt_at = None
    transition(f.s, f.p, node, NODE, "fail", Move(now, actor=actor,
               reason=said if said is not None else f.failure.reason))
    unbind(f.s, node, now)


def _returning(f: Failing) -> None:
    back_to_repair(f.s, f.p, f.node, f.failure.reason, f.failure.now, f.failure.actor)


def _held(_f: Failing) -> None:
    """The breaker holds the deploy (services/fleet/deploy_breaker.py): nothing moves."""


def _delivering(f: Failing) -> None:
    assert f.inst is not None
    _to_maintenance(f)
    if not move_to_spare(f):
        fail_instance(f.s, f.p, f.inst, phrase("node {node}: {reason}", node=f.node.name,
                                               reason=f.failure.reason),
                      f.failure.now, f.failure.actor)


def _replacing(f: Failing) -> None:
    assert f.inst is not None
    _to_maintenance(f)
    if move_to_spare(f):
        return
    now, actor = f.failure.now, f.failure.actor
    why = phrase("the spare {node} failed ({reason}) and no other is free",
                 node=f.node.name, reason=f.failure.reason)
    transition(f.s, f.p, f.inst, INSTANCE_STAGE, "settle", Move(now, actor=actor,
               reason=phrase("replacement given up: {why}", why=why)))
    for kept in f.s.scalars(select(Node).where(Node.instance_id == f.inst.id,
                                               Node.status == NodeStatus.ACTIVE.value)):
        repair = open_repair(f.s, kept.id)  # it served on while its disk was copied
        if repair is not None:
            repair.finished_at, repair.finished_by = now, actor
            repair.parts = "none: the replacement was given up; the server serves on"
    note(f.s, now, f.inst.id, "replacement_failed", why, actor=actor)


def _order_fault(f: Failing) -> None:
    """Not the server's fault: no spare would do better. The order fails with the reason;
    its reconcile cleans the server, which goes back to the pool."""
    assert f.inst is not None
    f.node.next_attempt_at = None  # the instance's reconcile starts its cleaning
    fail_instance(f.s, f.p, f.inst, phrase("node {node}: {reason}", node=f.node.name,
                                           reason=f.failure.reason),
                  f.failure.now, f.failure.actor)


def _cleaning(f: Failing) -> None:
    _to_maintenance(f, phrase("cleaning not finished, disks not certified erased: {reason}",
                              reason=f.failure.reason))


def _other(f: Failing) -> None:
    _to_maintenance(f)


ON_FAILURE: dict[Situation, Callable[[Failing], None]] = {
    Situation.RETURNING: _returning,
    Situation.HELD: _held,
    Situation.DELIVERING: _delivering,
    Situation.ORDER_FAULT: _order_fault,
    Situation.REPLACING: _replacing,
    Situation.CLEANING: _cleaning,
    Situation.OTHER: _other,
}


def move_to_spare(f: Failing) -> bool:
    """The instance goes on on a free node of its offer (its fabric for a cluster), within
    GPULEASE_MAX_NODE_MOVES; False when none may or can be claimed."""
    s, p, inst, failed = f.s, f.p, f.inst, f.node
    now, actor, reason = f.failure.now, f.failure.actor, f.failure.reason
    assert inst is not None
    moves = s.scalar(select(func.count()).select_from(Event).where(
        Event.resource == "instance", Event.resource_id == inst.id, Event.to_value == "moved"))
    if (moves or 0) >= p.settings.max_node_moves:
        return False
    spare = claim_replacement(s, now, inst, failed, actor=actor)
    if spare is None:
        return False
    note(s, now, inst.id, "moved",
         phrase("node {failed} failed ({reason}); continuing on {spare}",
         failed=failed.name, reason=reason, spare=spare.name), actor=actor)
    log.info("instance %s moved from node %s to %s: %s", inst.id, failed.name, spare.name,
             reason, extra={"fields": {"decision": "move", "instance": inst.id,
                                       "from_node": failed.name, "to_node": spare.name,
                                       "reason": reason}})
    if InstanceStatus(inst.status) is InstanceStatus.DEPLOYING or (
            inst.stage == InstanceStage.REPLACING.value):
        start_deploy(s, p, spare, now, actor)
    return True


def back_to_repair(s: Session, p: Platform, node: Node, reason: str, now: datetime,
                   actor: str = WORKER) -> None:
    """A repaired node failed its burn-in (or its return to its tenant failed): back to
    repair with why, powered off. After a card repair it stays its tenant's (the instance
    waits in `in_repair`); a node on its way to the pool lets go of what it held."""
    drop_config_drives(s, node.id)
    if node.stage is not None:
        transition(s, p, node, NODE_STAGE, "abort", Move(now, actor=actor))
    node.safe_off_due = True
    node.next_attempt_at = None
    repair = burn_in_failed(s, node, reason, now)
    transition(s, p, node, NODE, "burn_in_failed", Move(now, actor=actor,
               reason=phrase("burn-in after repair failed, back to repair: {reason}",
                              reason=reason)))
    if repair.instance_id is None and node.instance_id is not None:
        wake_instance(s, unbind(s, node, now), now)
    else:
        fence(node)
