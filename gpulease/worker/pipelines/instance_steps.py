"""What the instance pipeline does with a bare-metal or cluster instance: start its nodes'
deploys, deliver it once every node is active, clean its nodes when it is released or
failed, and finish the release. Containers start and stop in worker/pipelines/containers.py."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from gpulease.db.claims import release
from gpulease.db.repositories import bound_nodes
from gpulease.db.tables import Instance
from gpulease.domain.phrases import phrase
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
from gpulease.lifecycle.writer import transition
from gpulease.platform import Platform
from gpulease.services.storage.backups import restore_at_delivery
from gpulease.services.support.repairs import open_repair, stays_for_erase
from gpulease.services.support.swap_copy import swap_copy_step
from gpulease.services.support.tickets import mitigate_replaced
from gpulease.worker.pipelines.node_outcomes import start_cleaning, start_deploy


def deliver(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    """Its effects (lifecycle/writer.py): the hold becomes a charge, the lease starts,
    a late delivery is credited; then the snapshot the order named is queued for restore."""
    inst.ready_at = now
    transition(s, p, inst, INSTANCE, "deliver", now, actor=WORKER)
    transition(s, p, inst, INSTANCE_STAGE, "deliver", now, actor=WORKER)
    inst.next_attempt_at = None
    restore_at_delivery(s, p, inst)


def finish_release(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    """Nothing is held any more: a released instance is over; a failed one keeps its
    status (and reason) until its tenant releases it. The root password goes either way."""
    if inst.status == InstanceStatus.RELEASING.value:
        inst.released_at = now
        transition(s, p, inst, INSTANCE, "finish", now, actor=WORKER)
        transition(s, p, inst, INSTANCE_STAGE, "finish", now, actor=WORKER)
    inst.root_password_enc = None
    inst.next_attempt_at = None


def reconcile(s: Session, p: Platform, inst: Instance) -> None:
    now = p.clock.now()
    release(inst)
    poll = now + timedelta(seconds=max(p.settings.poll_interval_s * 4, 1.0))
    nodes = bound_nodes(s, inst.id, lock=True)
    status = InstanceStatus(inst.status)

    if status is InstanceStatus.PENDING:
        transition(s, p, inst, INSTANCE, "deploy", now, actor=WORKER)
        transition(s, p, inst, INSTANCE_STAGE, "deploy", now, actor=WORKER,
                   timeout_s=p.settings.stage_timeout_s)
        for node in nodes:
            if node.status == NodeStatus.ALLOCATED.value:
                start_deploy(s, p, node, now, WORKER)
        inst.next_attempt_at = poll
        p.wake()
    elif status is InstanceStatus.DEPLOYING:
        if len(nodes) == inst.node_count and all(
            n.status == NodeStatus.ACTIVE.value for n in nodes
        ):
            inst.ip_address = nodes[0].ip_address
            inst.ssh_port = 22
            deliver(s, p, inst, now)
        else:
            inst.next_attempt_at = poll  # nodes wake us; this is the safety net
    elif status in (InstanceStatus.RELEASING, InstanceStatus.FAILED):
        reason = "released by tenant" if status is InstanceStatus.RELEASING else (
            "instance failed: erasing before reuse")
        if inst.kind == "container":
            nodes = []  # its GPUs were freed once its container stopped
        for node in nodes:
            if NodeStatus(node.status) in NODE_BUSY:
                start_cleaning(s, p, node, now, reason)
                p.wake()
            elif node.status == NodeStatus.REPAIR.value:
                # out for a card repair: it no longer returns to this instance; the erase
                # after its repair (certificates for this tenant) ends the release
                stays_for_erase(s, node.id, now)
        if nodes:
            if status is InstanceStatus.RELEASING and inst.stage != InstanceStage.CLEANING:
                transition(s, p, inst, INSTANCE_STAGE, "clean", now, actor=WORKER,
                           timeout_s=p.settings.stage_timeout_s)
            inst.next_attempt_at = poll
        else:
            finish_release(s, p, inst, now)
    elif status is InstanceStatus.READY and inst.stage == InstanceStage.REPLACING:
        outgoing = [n for n in nodes if open_repair(s, n.id) is not None]  # swapped out
        serving = [n for n in nodes if n not in outgoing
                   and n.status != NodeStatus.CLEANING.value]
        ready = len(serving) == inst.node_count and all(
            n.status == NodeStatus.ACTIVE.value for n in serving)
        if ready and swap_copy_step(s, p, inst.id, inst.tenant_id, serving[0], now):
            inst.next_attempt_at = poll  # the data disk is on its way to the spare
        elif ready:
            for old in outgoing:  # it served on while its disk was copied: now erased
                if old.status == NodeStatus.ACTIVE.value:
                    start_cleaning(s, p, old, now, f"{SWAPPED_OUT}: erase, then repair")
                    p.wake()
            inst.ip_address = serving[0].ip_address
            transition(s, p, inst, INSTANCE_STAGE, "settle", now, actor=WORKER,
                       reason=phrase("replaced: now on {nodes}",
                                     nodes=", ".join(n.name for n in serving)))
            note(s, now, inst.id, "replaced", phrase(
                "the spare is delivered and accepted: {nodes}",
                nodes=", ".join(n.name for n in serving)), actor=WORKER)
            mitigate_replaced(s, p, inst, [n.name for n in serving], now, WORKER)
            inst.next_attempt_at = None
        else:
            inst.next_attempt_at = poll
    elif status is InstanceStatus.READY and inst.stage == InstanceStage.IN_REPAIR:
        if len(nodes) == inst.node_count and all(
                n.status == NodeStatus.ACTIVE.value for n in nodes):
            transition(s, p, inst, INSTANCE_STAGE, "settle", now, actor=WORKER,
                       reason=phrase("the repaired node is back, burned in and accepted"))
            note(s, now, inst.id, "repaired", phrase(
                "the node is back from repair, burned in and accepted: {nodes}",
                nodes=", ".join(n.name for n in nodes)), actor=WORKER)
            inst.next_attempt_at = None
        else:
            inst.next_attempt_at = None  # the node's return wakes us (a repair takes hours)
    else:  # READY or RELEASED: nothing to drive
        inst.next_attempt_at = None
