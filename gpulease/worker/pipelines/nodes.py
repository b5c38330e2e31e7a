"""The node pipeline: drive a claimed node one deploy or clean step. Read a snapshot, do
the I/O outside any transaction, then apply the result in a transaction guarded by the
row's lock token. Every status and stage moves through lifecycle/writer.py."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.polling import next_poll_in
from gpulease.domain.states import (
    BURN_IN_STAGES,
    INSTANCE,
    INSTANCE_STAGE,
    NODE,
    NODE_IN_PIPELINE,
    NODE_STAGE,
    RETURN_ORDER,
    UNSAFE_TO_REPEAT,
    InstanceStage,
    InstanceStatus,
    NodeStage,
    NodeStatus,
)
from gpulease.lifecycle.binding import fence, unbind
from gpulease.lifecycle.history import WORKER, note, record_event
from gpulease.lifecycle.writer import transition
from gpulease.platform import Platform
from gpulease.services.agents.evidence import failure_reason, record_acceptance, record_certificates
from gpulease.services.fleet.deploy_breaker import deploy_succeeded, hold_failed_deploy
from gpulease.services.orders.placement import claim_replacement
from gpulease.services.support.repairs import burn_in_failed, burned_in, open_repair
from gpulease.worker.pipelines.base import (
    Claim,
    StepFailed,
    apply_with_retry,
    backoff,
    guarded,
    lock_instance_first,
    release_lock,
    step_failed,
)
from gpulease.worker.pipelines.node_inputs import (
    drop_config_drives,
    make_config_drive,
    needs_drive,
    step_input,
)
from gpulease.worker.pipelines.node_steps import STEPS, Outcome, StepInput, StepResult

log = logging.getLogger("gpulease.worker")


def wake_instance(s: Session, instance_id: str | None, now: datetime) -> None:
    if instance_id:
        s.execute(update(Instance).where(Instance.id == instance_id)
                  .values(next_attempt_at=now).execution_options(synchronize_session=False))


def process_node(p: Platform, claim: Claim) -> None:
    with p.db.write() as s:
        node: Node | None = guarded(s, Node, claim)
        if node is None:
            return
        if NodeStatus(node.status) not in NODE_IN_PIPELINE or node.stage is None:
            node.next_attempt_at = None
            release_lock(node)
            return
        if claim.taken_over and node.step_in_progress in UNSAFE_TO_REPEAT:
            _interrupted_unsafe(s, p, node, node.step_in_progress)
            return
        inst = s.get(Instance, node.instance_id) if node.instance_id else None
        job = step_input(s, p, node, inst)
        node.step_in_progress = node.stage

    if needs_drive(p, job.stage, job.agent_kind, job.bmc_driver) and job.instance_id and not (
            job.config_drive_url):
        job = make_config_drive(p, job)
    try:
        result: StepResult | StepFailed = STEPS[job.stage](p, job)
    except Exception as exc:  # drivers raise their own errors; classify by `retryable`
        result = step_failed(exc)
        log.warning("node %s step %s failed: %s", job.node_name, job.stage, exc)

    apply_with_retry(p, f"node {job.node_name} step {job.stage}",
                     lambda: _apply_node(p, claim, job, result))


def _apply_node(p: Platform, claim: Claim, job: StepInput, result: StepResult | StepFailed) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        lock_instance_first(s, job.instance_id)
        node: Node | None = guarded(s, Node, claim)
        if node is None or node.stage != job.stage:
            return  # lost the lock or the row moved on (release, operator): drop the result
        release_lock(node)
        if isinstance(result, StepFailed):
            node.attempts += 1
            node.last_error = str(result)
            if result.retryable and node.attempts < p.settings.max_attempts:
                node.next_attempt_at = now + timedelta(seconds=backoff(p, node.attempts))
                log.info("node %s: %s retried (attempt %d of %d): %s", job.node_name,
                         job.stage, node.attempts, p.settings.max_attempts, result,
                         extra={"fields": {"decision": "retry", "node": job.node_name,
                                           "step": job.stage, "attempt": node.attempts,
                                           "error": str(result)}})
                record_event(s, now, "node", node.id, "error", actor=WORKER,
                             instance_id=node.instance_id, to_value=job.stage,
                             message=phrase("attempt {attempt}: {error}",
                                            attempt=node.attempts, error=str(result)))
                return
            tries = f" after {node.attempts} attempts" if result.retryable else ""
            fail_node(s, p, node, f"{job.stage} failed{tries}: {result}", now, breaker=True)
            return
        if result.ip_address:
            node.ip_address = result.ip_address
        burning_in = job.stage in BURN_IN_STAGES
        if result.report is not None:
            report_id = record_acceptance(s, p, node, node.instance_id, result.report,
                                          "burn_in" if burning_in else "delivery", now,
                                          actor=WORKER)
            if not result.report.passed:
                if burning_in:
                    back_to_repair(s, p, node, failure_reason(result.report, report_id), now)
                else:
                    fail_node(s, p, node, failure_reason(result.report, report_id), now)
                p.wake()
                return
            if burning_in:
                burned_in(s, p, node, report_id, now)
        elif job.stage == NodeStage.RETURN_VERIFY and result.outcome is Outcome.ADVANCE:
            burned_in(s, p, node, None, now)  # the offer sets no marks: back as it is
        if result.certificates:
            unverified = record_certificates(s, node.id, node.instance_id,
                                             result.certificates, now)
            if unverified:
                fail_node(s, p, node, f"erase verification failed on "
                                      f"{', '.join(unverified)}", now)
                p.wake()
                return
        if result.requested:
            node.stage_requests = (node.stage_requests or 0) + 1
        if result.outcome is Outcome.WAIT:
            node.stage_polls = (node.stage_polls or 0) + 1
            elapsed = (now - node.stage_started_at).total_seconds() if (
                node.stage_started_at) else 0.0
            node.next_attempt_at = now + timedelta(
                seconds=next_poll_in(elapsed, p.settings.poll_interval_s))
            return
        if result.note:
            record_event(s, now, "node", node.id, "result", actor=WORKER,
                         instance_id=node.instance_id, to_value=job.stage, message=result.note)
        if NODE_STAGE.allows(NodeStage(job.stage), "advance"):
            transition(s, p, node, NODE_STAGE, "advance", now, actor=WORKER,
                       timeout_s=p.settings.stage_timeout_s)
            node.next_attempt_at = now
        else:
            _finish_node(s, p, node, now)
    p.wake()


def _finish_node(s: Session, p: Platform, node: Node, now: datetime) -> None:
    """The last step is done: a deploy's node is active, a cleaned one free (or drained)."""
    instance_id = node.instance_id
    drop_config_drives(s, node.id)  # installed (or cleaned): the secrets in it are spent
    transition(s, p, node, NODE_STAGE, "done", now, actor=WORKER)
    node.next_attempt_at = None
    if node.status == NodeStatus.DEPLOYING.value:
        transition(s, p, node, NODE, "activate", now, actor=WORKER)
        deploy_succeeded(s, p, node, now)
    else:
        unbind(s, node, now)
        repair = open_repair(s, node.id)
        if repair is not None:  # swapped out of its instance: erased, now for repair
            node.drain_requested_at = None
            transition(s, p, node, NODE, "send_to_repair", now, actor=WORKER,
                       reason=phrase("in repair: {why}; the tenant's disks erased",
                                     why=repair.reason))
        elif node.drain_requested_at is not None:
            transition(s, p, node, NODE, "drain", now, actor=WORKER,
                       reason=phrase("drained by operator"))
        else:
            transition(s, p, node, NODE, "free", now, actor=WORKER)
    wake_instance(s, instance_id, now)


def fail_node(s: Session, p: Platform, node: Node, reason: str, now: datetime,
              actor: str = WORKER, breaker: bool = False) -> None:
    """A step failed for good: the node needs an operator. It goes to maintenance with the
    reason and lets go of its instance. During delivery the order moves to a free node of
    the same offer (same fabric for a cluster) when there is one; else it fails with the
    reason. `breaker`: a failure the deploy circuit breaker judges (a step's error or a
    timeout, not a hardware verdict): while it is open the deploy is held instead."""
    if node.stage in RETURN_ORDER:  # back from a card repair: it stays its tenant's
        back_to_repair(s, p, node, reason, now, actor)
        return
    instance_id = node.instance_id
    was_cleaning = node.status == NodeStatus.CLEANING.value
    if breaker and node.status == NodeStatus.DEPLOYING.value and hold_failed_deploy(
            s, p, node, reason, now):
        return
    drop_config_drives(s, node.id)
    if node.stage is not None:
        transition(s, p, node, NODE_STAGE, "abort", now, actor=actor)
        node.safe_off_due = True  # media out, no boot override, power off (jobs/fleet/safe_off)
    node.next_attempt_at = None
    said: str | Phrase = reason
    if was_cleaning:
        said = phrase("cleaning not finished, disks not certified erased: {reason}",
                      reason=reason)
    transition(s, p, node, NODE, "fail", now, actor=actor, reason=said)
    unbind(s, node, now)
    inst = s.get(Instance, instance_id) if instance_id and not was_cleaning else None
    delivering = inst is not None and inst.status in (InstanceStatus.PENDING.value,
                                                      InstanceStatus.DEPLOYING.value)
    replacing = inst is not None and inst.status == InstanceStatus.READY.value and (
        inst.stage == InstanceStage.REPLACING.value)
    if inst is not None and delivering and not _move_to_spare(s, p, inst, node, reason, now,
                                                              actor):
        fail_instance(s, p, inst, phrase("node {node}: {reason}", node=node.name,
                                         reason=reason), now, actor)
    elif inst is not None and replacing and not _move_to_spare(s, p, inst, node, reason, now,
                                                               actor):
        why = phrase("the spare {node} failed ({reason}) and no other is free",
                     node=node.name, reason=reason)
        transition(s, p, inst, INSTANCE_STAGE, "settle", now, actor=actor,
                   reason=phrase("replacement given up: {why}", why=why))
        for kept in s.scalars(select(Node).where(Node.instance_id == inst.id,
                                                 Node.status == NodeStatus.ACTIVE.value)):
            repair = open_repair(s, kept.id)  # it served on while its disk was copied
            if repair is not None:
                repair.finished_at, repair.finished_by = now, actor
                repair.parts = "none: the replacement was given up; the server serves on"
        note(s, now, inst.id, "replacement_failed", why, actor=actor)
    wake_instance(s, instance_id, now)


def back_to_repair(s: Session, p: Platform, node: Node, reason: str, now: datetime,
                   actor: str = WORKER) -> None:
    """A repaired node failed its burn-in (or its return to its tenant failed): back to
    repair with why, powered off. After a card repair it stays its tenant's (the instance
    waits in `in_repair`); a node on its way to the pool lets go of what it held."""
    drop_config_drives(s, node.id)
    if node.stage is not None:
        transition(s, p, node, NODE_STAGE, "abort", now, actor=actor)
    node.safe_off_due = True
    node.next_attempt_at = None
    repair = burn_in_failed(s, node, reason, now)
    transition(s, p, node, NODE, "burn_in_failed", now, actor=actor,
               reason=phrase("burn-in after repair failed, back to repair: {reason}",
                              reason=reason))
    if repair.instance_id is None and node.instance_id is not None:
        wake_instance(s, unbind(s, node, now), now)
    else:
        fence(node)


def fail_instance(s: Session, p: Platform, inst: Instance, reason: str | Phrase,
                  now: datetime, actor: str) -> None:
    transition(s, p, inst, INSTANCE, "fail", now, actor=actor, reason=reason)
    transition(s, p, inst, INSTANCE_STAGE, "fail", now, actor=actor, reason=reason)
    inst.next_attempt_at = now


def _move_to_spare(s: Session, p: Platform, inst: Instance, failed: Node, reason: str,
                   now: datetime, actor: str) -> bool:
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
    if inst.status == InstanceStatus.DEPLOYING.value or (
            inst.stage == InstanceStage.REPLACING.value):
        start_deploy(s, p, spare, now, actor)
    return True


def start_deploy(s: Session, p: Platform, node: Node, now: datetime, actor: str) -> None:
    transition(s, p, node, NODE, "deploy", now, actor=actor)
    transition(s, p, node, NODE_STAGE, "deploy", now, actor=actor,
               timeout_s=p.settings.stage_timeout_s)
    node.next_attempt_at = now


def _interrupted_unsafe(s: Session, p: Platform, node: Node, step: str | None) -> None:
    """The previous owner died inside a step that is not safe to repeat: fail the deploy
    with a reason and clean the node rather than guess what the step left behind."""
    now = p.clock.now()
    release_lock(node)
    reason = phrase("deploy interrupted during {step} (worker lost); the step is not safe to "
                    "repeat, so the node is being cleaned", step=step)
    record_event(s, now, "node", node.id, "error", actor=WORKER, instance_id=node.instance_id,
                 to_value=step, message=reason)
    inst = s.get(Instance, node.instance_id) if node.instance_id else None
    start_cleaning(s, p, node, now, str(reason))
    if inst is not None and inst.status in (InstanceStatus.PENDING.value,
                                            InstanceStatus.DEPLOYING.value):
        fail_instance(s, p, inst, phrase("node {node}: {reason}", node=node.name,
                                         reason=reason), now, WORKER)


def start_cleaning(s: Session, p: Platform, node: Node, now: datetime, reason: str) -> None:
    """Takes the node from any worker mid-step (its guarded write then matches nothing);
    called with its instance locked."""
    release_lock(node)
    drop_config_drives(s, node.id)
    transition(s, p, node, NODE, "clean", now, actor=WORKER, reason=reason)
    transition(s, p, node, NODE_STAGE, "clean", now, actor=WORKER,
               timeout_s=p.settings.stage_timeout_s)
    node.next_attempt_at = now
