"""The node pipeline: drive a claimed node one deploy or clean step. Read a snapshot, do
the I/O outside any transaction, then apply the result in a transaction guarded by the
row's lock token. Every status and stage moves through lifecycle/writer.py."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_
from sqlalchemy.orm import Session

from gpulease.db.claims import Claim, begin_step, guarded, release
from gpulease.db.tables import Instance, Node
from gpulease.domain.fleet.polling import next_poll_in
from gpulease.domain.phrases import phrase
from gpulease.domain.states import (
    BURN_IN_STAGES,
    NODE_IN_PIPELINE,
    NODE_STAGE,
    UNSAFE_TO_REPEAT,
    InstanceStatus,
    NodeStage,
    NodeStatus,
)
from gpulease.lifecycle.binding import erased, unbind
from gpulease.lifecycle.history import WORKER, Happened, record_event
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.services.agents.evidence import (
    AcceptanceRun,
    failure_reason,
    record_acceptance,
    record_certificates,
)
from gpulease.services.support.repairs import burned_in
from gpulease.worker.pipelines.base import (
    Pipeline,
    StepFailed,
    apply_with_retry,
    backoff,
    lock_instance_first,
    step_failed,
)
from gpulease.worker.pipelines.fence import Fence
from gpulease.worker.pipelines.node_inputs import (
    make_config_drive,
    needs_drive,
    step_input,
)
from gpulease.worker.pipelines.node_outcomes import (
    Failing,
    Failure,
    back_to_repair,
    fail_instance,
    fail_node,
    finish_node,
    move_to_spare,
    start_cleaning,
    wake_instance,
)
from gpulease.worker.pipelines.node_steps import STEPS, Outcome, StepInput, StepResult

log = logging.getLogger("gpulease.worker")


def process_node(p: Platform, claim: Claim) -> None:
    with p.db.write() as s:
        node: Node | None = guarded(s, Node, claim)
        if node is None:
            return
        if NodeStatus(node.status) not in NODE_IN_PIPELINE or node.stage is None:
            node.next_attempt_at = None
            release(node)
            return
        if claim.taken_over and node.step_in_progress in UNSAFE_TO_REPEAT:
            _interrupted_unsafe(s, p, node, node.step_in_progress)
            return
        inst = s.get(Instance, node.instance_id) if node.instance_id else None
        job = replace(step_input(s, p, node, inst), fence=Fence(p, claim))
        begin_step(node, node.stage)

    if needs_drive(p, job.stage, job.agent_kind, job.bmc_driver) and job.instance_id and not (
            job.config_drive_url):
        job = make_config_drive(p, job)
    try:
        result: StepResult | StepFailed = STEPS[job.stage](p, job)
    except Exception as exc:  # drivers raise their own errors; classify by `retryable`
        result = step_failed(exc)
        log.warning("node %s step %s failed: %s", job.node_name, job.stage, exc)

    apply_with_retry(p, f"node {job.node_name} step {job.stage}",
                     lambda: _apply_node(p, claim, job, result), until=_stage_deadline(p, job))


def _stage_deadline(p: Platform, job: StepInput) -> datetime | None:
    started = job.stage_started_at
    return started + timedelta(seconds=p.settings.stage_timeout_s) if started else None


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [Node.status.in_([st.value for st in NODE_IN_PIPELINE]), Node.next_attempt_at <= now]


def _pending(now: datetime) -> ColumnElement[bool]:
    """Mid-deploy or mid-clean, due or waiting on a backoff or a poll."""
    return and_(Node.status.in_([st.value for st in NODE_IN_PIPELINE]),
                Node.next_attempt_at.is_not(None))


PIPELINE = Pipeline("nodes", Node, _due, _pending, process_node, region=Node.region)


def _apply_node(p: Platform, claim: Claim, job: StepInput, result: StepResult | StepFailed) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        lock_instance_first(s, job.instance_id)
        node: Node | None = guarded(s, Node, claim)
        if node is None or node.stage != job.stage:
            return  # lost the lock or the row moved on (release, operator): drop the result
        release(node)
        if isinstance(result, StepFailed):
            node.attempts += 1
            node.last_error = str(result)
            if result.retryable and node.attempts < p.settings.max_attempts:
                node.next_attempt_at = now + timedelta(seconds=max(  # not before the BMC
                    backoff(p, node.attempts), result.retry_after_s or 0.0))  # said to
                log.info("node %s: %s retried (attempt %d of %d): %s", job.node_name,
                         job.stage, node.attempts, p.settings.max_attempts, result,
                         extra={"fields": {"decision": "retry", "node": job.node_name,
                                           "step": job.stage, "attempt": node.attempts,
                                           "error": str(result)}})
                record_event(s, now, Happened(
                    "node", node.id, "error", node.instance_id, to_value=job.stage,
                    message=phrase("attempt {attempt}: {error}", attempt=node.attempts,
                                   error=str(result))), actor=WORKER)
                return
            tries = f" after {node.attempts} attempts" if result.retryable else ""
            fail_node(s, p, node, Failure(f"{job.stage} failed{tries}: {result}", now,
                                          breaker=result.node_fault,
                                          node_fault=result.node_fault))
            return
        if result.ip_address:
            node.ip_address = result.ip_address
        burning_in = job.stage in BURN_IN_STAGES
        if result.report is not None:
            report_id = record_acceptance(s, p, node, AcceptanceRun(
                result.report, "burn_in" if burning_in else "delivery", node.instance_id,
                WORKER), now)
            if not result.report.passed:
                if burning_in:
                    back_to_repair(s, p, node, failure_reason(result.report, report_id), now)
                else:
                    fail_node(s, p, node, Failure(failure_reason(result.report, report_id), now))
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
                fail_node(s, p, node, Failure(
                    f"erase verification failed on {', '.join(unverified)}", now))
                p.wake()
                return
            erased(node)  # certified: it may go back to the pool
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
            record_event(s, now, Happened("node", node.id, "result", instance_id=node.instance_id,
                                          to_value=job.stage, message=result.note), actor=WORKER)
        if NODE_STAGE.allows(NodeStage(job.stage), result.event):
            transition(s, p, node, NODE_STAGE, result.event, Move(now, actor=WORKER,
                       timeout_s=p.settings.stage_timeout_s))
            node.next_attempt_at = now
        else:
            finish_node(s, p, node, now)
    p.wake()


def _interrupted_unsafe(s: Session, p: Platform, node: Node, step: str | None) -> None:
    """The previous owner died inside a step that is not safe to repeat: the node is
    cleaned rather than guessed at, and the order goes on on a free node of its offer
    (within GPULEASE_MAX_NODE_MOVES); it fails with the reason only when none is free. The
    server is not at fault: it is cleaned, not sent to maintenance."""
    now = p.clock.now()
    release(node)
    reason = phrase("deploy interrupted during {step} (worker lost); the step is not safe to "
                    "repeat, so the node is being cleaned", step=step)
    record_event(s, now, Happened("node", node.id, "error", instance_id=node.instance_id,
                                  to_value=step, message=reason), actor=WORKER)
    inst = s.get(Instance, node.instance_id) if node.instance_id else None
    delivering = inst is not None and inst.status in (InstanceStatus.PENDING.value,
                                                      InstanceStatus.DEPLOYING.value)
    if delivering:
        unbind(s, node, now)  # the order lets go of it: it may go on on a spare
    start_cleaning(s, p, node, now, str(reason))
    if inst is None or not delivering:
        return
    if not move_to_spare(Failing(s, p, node, inst, Failure(str(reason), now))):
        fail_instance(s, p, inst, phrase("node {node}: {reason}", node=node.name,
                                         reason=reason), now, WORKER)
    wake_instance(s, inst.id, now)
