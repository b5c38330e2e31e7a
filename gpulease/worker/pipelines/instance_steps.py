"""What the instance pipeline does with an instance in each situation, one small handler
each in `ON_RECONCILE`: an order's nodes start their deploys; it is delivered once every
node is active; a released or failed one's nodes are cleaned, then the release finishes; a
swap delivers its spare, copies the data disk and erases the faulty server; a card repair
ends when the node is back. Containers start and stop in worker/pipelines/containers.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy.orm import Session

from gpulease.db.claims import release
from gpulease.db.repositories import bound_nodes
from gpulease.db.tables import Instance, Node
from gpulease.domain.phrases import phrase
from gpulease.domain.ssh import ssh_address
from gpulease.domain.states import (
    INSTANCE,
    INSTANCE_STAGE,
    NODE_BUSY,
    InstanceStage,
    InstanceStatus,
    NodeStatus,
)
from gpulease.domain.tickets import SWAPPED_OUT
from gpulease.lifecycle.history import WORKER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.services.storage.backups import restore_at_delivery
from gpulease.services.support.repairs import open_repair, stays_for_erase
from gpulease.services.support.swap_copy import swap_copy_step
from gpulease.services.support.tickets import mitigate_replaced
from gpulease.worker.pipelines.node_outcomes import start_cleaning, start_deploy


def move_instance(s: Session, p: Platform, inst: Instance, event: str, now: datetime,
                  timeout_s: float | None = None) -> None:
    """An instance's status and stage move together by `event` (deploy, deliver, finish:
    the events both machines declare), by the worker."""
    transition(s, p, inst, INSTANCE, event, Move(now, actor=WORKER))
    transition(s, p, inst, INSTANCE_STAGE, event, Move(now, actor=WORKER, timeout_s=timeout_s))


def deliver(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    """Its effects (services/money/effects.py): the hold becomes a charge, the lease starts,
    a late delivery is credited; then the snapshot the order named is queued for restore."""
    inst.ready_at = now
    move_instance(s, p, inst, "deliver", now)
    inst.next_attempt_at = None
    restore_at_delivery(s, p, inst)


def finish_release(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    """Nothing is held any more: a released instance is over; a failed one keeps its
    status (and reason) until its tenant releases it. The root password goes either way."""
    if InstanceStatus(inst.status) is InstanceStatus.RELEASING:
        inst.released_at = now
        move_instance(s, p, inst, "finish", now)
    inst.root_password_enc = None
    inst.next_attempt_at = None


@dataclass(frozen=True)
class Reconciling:
    """What a handler is given: the instance (locked, its claim let go) and its nodes
    (locked), the time, and when the safety-net poll comes."""

    s: Session
    p: Platform
    inst: Instance
    nodes: list[Node]
    now: datetime
    poll: datetime

    def all_active(self, nodes: list[Node]) -> bool:
        return len(nodes) == self.inst.node_count and all(
            NodeStatus(n.status) is NodeStatus.ACTIVE for n in nodes)


class Situation(StrEnum):
    ORDERED = "ordered"  # placed: its nodes are to start their deploys
    DELIVERING = "delivering"  # its nodes are deploying
    ENDING = "ending"  # released or failed: its nodes to be cleaned, then over
    REPLACING = "replacing"  # a swap's spare on its way
    IN_REPAIR = "in_repair"  # a node out for a card repair, to come back
    SETTLED = "settled"  # delivered (or over): nothing to drive


def situation(inst: Instance) -> Situation:
    status = InstanceStatus(inst.status)
    if status is InstanceStatus.PENDING:
        return Situation.ORDERED
    if status is InstanceStatus.DEPLOYING:
        return Situation.DELIVERING
    if status in (InstanceStatus.RELEASING, InstanceStatus.FAILED):
        return Situation.ENDING
    stage = InstanceStage(inst.stage) if inst.stage else None
    if status is InstanceStatus.READY and stage is InstanceStage.REPLACING:
        return Situation.REPLACING
    if status is InstanceStatus.READY and stage is InstanceStage.IN_REPAIR:
        return Situation.IN_REPAIR
    return Situation.SETTLED


def reconcile(s: Session, p: Platform, inst: Instance) -> None:
    """One step of the instance: its situation's handler."""
    now = p.clock.now()
    release(inst)
    poll = now + timedelta(seconds=max(p.settings.poll_interval_s * 4, 1.0))
    nodes = bound_nodes(s, inst.id, lock=True)
    ON_RECONCILE[situation(inst)](Reconciling(s, p, inst, nodes, now, poll))


def _start_deploys(r: Reconciling) -> None:
    move_instance(r.s, r.p, r.inst, "deploy", r.now, timeout_s=r.p.settings.stage_timeout_s)
    for node in r.nodes:
        if NodeStatus(node.status) is NodeStatus.ALLOCATED:
            start_deploy(r.s, r.p, node, r.now, WORKER)
    r.inst.next_attempt_at = r.poll
    r.p.wake()


def _deliver_when_active(r: Reconciling) -> None:
    if r.all_active(r.nodes):
        r.inst.ip_address, r.inst.ssh_port = ssh_address(r.nodes[0].ip_address,
                                                         r.nodes[0].ssh_endpoint)
        deliver(r.s, r.p, r.inst, r.now)
    else:
        r.inst.next_attempt_at = r.poll  # nodes wake us; this is the safety net


def _clean_then_finish(r: Reconciling) -> None:
    s, p, inst, now = r.s, r.p, r.inst, r.now
    releasing = InstanceStatus(inst.status) is InstanceStatus.RELEASING
    reason = "released by tenant" if releasing else "instance failed: erasing before reuse"
    nodes = [] if inst.kind == "container" else r.nodes  # its GPUs went with its container
    for node in nodes:
        if NodeStatus(node.status) in NODE_BUSY:
            start_cleaning(s, p, node, now, reason)
            p.wake()
        elif NodeStatus(node.status) is NodeStatus.REPAIR:
            # out for a card repair: it no longer returns to this instance; the erase
            # after its repair (certificates for this tenant) ends the release
            stays_for_erase(s, node.id, now)
    if not nodes:
        finish_release(s, p, inst, now)
        return
    if releasing and inst.stage != InstanceStage.CLEANING:
        transition(s, p, inst, INSTANCE_STAGE, "clean", Move(now, actor=WORKER,
                                                             timeout_s=p.settings.stage_timeout_s))
    inst.next_attempt_at = r.poll


def _replace(r: Reconciling) -> None:
    s, p, inst, now = r.s, r.p, r.inst, r.now
    repairs = {n.id: repair for n in r.nodes if (repair := open_repair(s, n.id)) is not None}
    outgoing = [n for n in r.nodes if n.id in repairs]  # swapped out
    serving = [n for n in r.nodes if n not in outgoing
               and NodeStatus(n.status) is not NodeStatus.CLEANING]
    if not r.all_active(serving):
        inst.next_attempt_at = r.poll
        return
    if swap_copy_step(s, p, inst, serving[0],
                      {n.id: repairs[n.id].started_at for n in outgoing}, now):
        inst.next_attempt_at = r.poll  # the data disk is on its way to the spare
        return
    for old in outgoing:  # it served on while its disk was copied: now erased
        if NodeStatus(old.status) is NodeStatus.ACTIVE:
            start_cleaning(s, p, old, now, f"{SWAPPED_OUT}: erase, then repair")
            p.wake()
    inst.ip_address = serving[0].ip_address
    names = ", ".join(n.name for n in serving)
    transition(s, p, inst, INSTANCE_STAGE, "settle", Move(now, actor=WORKER,
               reason=phrase("replaced: now on {nodes}", nodes=names)))
    note(s, now, inst.id, "replaced", phrase(
        "the spare is delivered and accepted: {nodes}", nodes=names), actor=WORKER)
    mitigate_replaced(s, p, inst, [n.name for n in serving], now, WORKER)
    inst.next_attempt_at = None


def _back_from_repair(r: Reconciling) -> None:
    if r.all_active(r.nodes):
        transition(r.s, r.p, r.inst, INSTANCE_STAGE, "settle", Move(r.now, actor=WORKER,
                   reason=phrase("the repaired node is back, burned in and accepted")))
        note(r.s, r.now, r.inst.id, "repaired", phrase(
            "the node is back from repair, burned in and accepted: {nodes}",
            nodes=", ".join(n.name for n in r.nodes)), actor=WORKER)
    r.inst.next_attempt_at = None  # else the node's return wakes us (a repair takes hours)


def _settled(r: Reconciling) -> None:
    r.inst.next_attempt_at = None


ON_RECONCILE: dict[Situation, Callable[[Reconciling], None]] = {
    Situation.ORDERED: _start_deploys,
    Situation.DELIVERING: _deliver_when_active,
    Situation.ENDING: _clean_then_finish,
    Situation.REPLACING: _replace,
    Situation.IN_REPAIR: _back_from_repair,
    Situation.SETTLED: _settled,
}
