"""Drive claimed rows one step: read a snapshot, do the I/O outside any transaction, then
apply the result in a transaction guarded by the row's lock token."""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gpulease.configdrive import ConfigDriveSpec, build_iso
from gpulease.db.repositories import bound_nodes, instance_allocations
from gpulease.db.tables import ConfigDrive, Event, GpuAllocation, Instance, Node
from gpulease.domain.states import (
    CLEAN_ORDER,
    DEPLOY_ORDER,
    UNSAFE_TO_REPEAT,
    CleanStage,
    DeployStage,
    InstanceStatus,
    NodeStatus,
)
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.ports.runtime import ContainerSpec
from gpulease.security import hash_token
from gpulease.services.agents import (
    failure_reason,
    mint_enrollment,
    record_acceptance,
    record_certificates,
)
from gpulease.services.images import find_image
from gpulease.services.status import (
    enter_stage,
    record_event,
    switch_instance_status,
    switch_node_status,
)
from gpulease.services.wallet import credit_late_delivery
from gpulease.worker.node_steps import STEPS, NodeJob, Outcome, StepResult
from gpulease.worker.pipeline import Claim, claim_due, release_lock

log = logging.getLogger("gpulease.worker")

DEPLOY_STAGES = [st.value for st in DEPLOY_ORDER]
CLEAN_STAGES = [st.value for st in CLEAN_ORDER]


class StepFailed(Exception):
    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def backoff(p: Platform, attempts: int) -> float:
    """Exponential backoff with full jitter (half to all of the capped delay)."""
    delay = min(p.settings.backoff_max_s, p.settings.backoff_base_s * 2 ** max(attempts - 1, 0))
    return delay * random.uniform(0.5, 1.0)


def _guarded(
    s: Session, table: type[Node] | type[Instance], claim: Claim
) -> Node | Instance | None:
    return s.scalar(
        select(table).where(table.id == claim.id, table.lock_token == claim.token)
        .with_for_update()
    )


def _lock_instance_first(s: Session, instance_id: str | None) -> None:
    # Lock order everywhere is instance, then node: no deadlock between reconcilers.
    if instance_id:
        s.execute(select(Instance.id).where(Instance.id == instance_id).with_for_update())


def release_allocations(s: Session, node_id: str, now: datetime,
                        instance_id: str | None = None) -> None:
    q = update(GpuAllocation).where(GpuAllocation.node_id == node_id,
                                    GpuAllocation.released_at.is_(None))
    if instance_id:
        q = q.where(GpuAllocation.instance_id == instance_id)
    s.execute(q.values(released_at=now).execution_options(synchronize_session=False))


def wake_instance(s: Session, instance_id: str | None, now: datetime) -> None:
    if instance_id:
        s.execute(update(Instance).where(Instance.id == instance_id)
                  .values(next_attempt_at=now).execution_options(synchronize_session=False))


# --------------------------------------------------------------------------- nodes
def _image_url(s: Session, p: Platform, image_id: str) -> str:
    image = find_image(s, p, image_id)
    if image and image.url:
        return image.url
    return f"{p.settings.media_base_url.rstrip('/')}/{image_id}.iso"


def _node_job(s: Session, p: Platform, node: Node, inst: Instance | None) -> NodeJob:
    password = ""
    needs_password = (DeployStage.CONFIGURE.value, DeployStage.ATTACH_MEDIA.value)
    if inst is not None and inst.root_password_enc and node.stage in needs_password:
        password = p.box.open(inst.root_password_enc)
    return NodeJob(
        node_id=node.id, node_name=node.name, stage=node.stage or "",
        bmc_driver=node.bmc_driver,
        endpoint=BmcEndpoint(node.name, node.bmc_address, node.bmc_username,
                             p.box.open(node.bmc_password_enc)),
        instance_id=node.instance_id,
        image_url=_image_url(s, p, inst.image_id) if inst else "",
        agent_media_url=f"{p.settings.media_base_url.rstrip('/')}/agent-ramdisk.iso",
        ssh_keys=tuple(inst.ssh_keys.splitlines()) if inst else (),
        root_password=password,
        hostname=(inst.name or inst.id) if inst else node.name,
        polls=node.stage_polls or 0,
        config_drive_url=_existing_drive_url(s, p, node, inst),
        acceptance=p.catalog.marks(node.sku, node.region)
        if node.stage == DeployStage.VERIFY.value else None,
        agent_kind=node.agent_kind,
        stage_started_at=node.stage_started_at,
        boot=offer.boot if (offer := p.catalog.offer(node.sku, node.region)) else
        "virtual_media",
        http_boot_uri=p.settings.http_boot_uri or None,
    )


def _drive_url(p: Platform, drive_id: str) -> str:
    return f"{p.settings.public_url.rstrip('/')}/media/config/{drive_id}.iso"


def _needs_drive(stage: str | None, agent_kind: str) -> bool:
    """Deploys carry a config drive; so does a real agent's ramdisk boot for cleaning (its
    one-time enrollment token)."""
    return stage == DeployStage.ATTACH_MEDIA.value or (
        stage == CleanStage.ATTACH_MEDIA.value and agent_kind == "gpulease")


def _existing_drive_url(s: Session, p: Platform, node: Node, inst: Instance | None) -> str | None:
    if inst is None or not _needs_drive(node.stage, node.agent_kind):
        return None
    drive_id = s.scalar(select(ConfigDrive.id).where(ConfigDrive.node_id == node.id,
                                                     ConfigDrive.instance_id == inst.id))
    return _drive_url(p, drive_id) if drive_id else None


def _make_config_drive(p: Platform, job: NodeJob) -> NodeJob:
    """Build the deploy's config drive outside any transaction, store it, and return the
    job with the URL the BMC will fetch it from."""
    assert job.instance_id is not None
    agent_token = "glat_" + secrets.token_urlsafe(32)
    iso = build_iso(ConfigDriveSpec(
        instance_id=job.instance_id, hostname=job.hostname, ssh_keys=job.ssh_keys,
        # a cleaning ramdisk's drive gets a random, never shown password, not an empty one
        root_password=job.root_password or secrets.token_urlsafe(24),
        agent_url=p.settings.public_url,
        agent_token=agent_token))
    drive_id = secrets.token_urlsafe(32)
    with p.db.write() as s:
        s.add(ConfigDrive(id=drive_id, node_id=job.node_id, instance_id=job.instance_id,
                          agent_token_hash=hash_token(agent_token), iso=iso,
                          created_at=p.clock.now()))
        mint_enrollment(s, job.node_id, job.instance_id, p.clock.now(), token=agent_token)
    return replace(job, config_drive_url=_drive_url(p, drive_id))


def drop_config_drives(s: Session, node_id: str) -> None:
    s.execute(delete(ConfigDrive).where(ConfigDrive.node_id == node_id))


def process_node(p: Platform, claim: Claim) -> None:
    with p.db.write() as s:
        node = _guarded(s, Node, claim)
        if node is None:
            return
        assert isinstance(node, Node)
        if node.status not in (NodeStatus.DEPLOYING.value, NodeStatus.CLEANING.value) or (
            node.stage is None
        ):
            node.next_attempt_at = None
            release_lock(node)
            return
        if claim.taken_over and node.step_in_progress in UNSAFE_TO_REPEAT:
            step = node.step_in_progress
            _interrupted_unsafe(s, p, node, step)
            return
        inst = s.get(Instance, node.instance_id) if node.instance_id else None
        job = _node_job(s, p, node, inst)
        node.step_in_progress = node.stage

    if _needs_drive(job.stage, job.agent_kind) and job.instance_id and not (
            job.config_drive_url):
        job = _make_config_drive(p, job)
    try:
        result: StepResult | StepFailed = STEPS[job.stage](p, job)
    except Exception as exc:  # drivers raise their own errors; classify by `retryable`
        retryable = bool(getattr(exc, "retryable", True))
        result = StepFailed(f"{type(exc).__name__}: {exc}", retryable)
        log.warning("node %s step %s failed: %s", job.node_name, job.stage, exc)

    try:
        _apply_node(p, claim, job, result)
    except OperationalError as exc:  # deadlock or serialization: the lock expires, retried
        log.warning("node %s: could not apply step %s: %s", job.node_name, job.stage, exc)


def _apply_node(p: Platform, claim: Claim, job: NodeJob, result: StepResult | StepFailed) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        _lock_instance_first(s, job.instance_id)
        node = _guarded(s, Node, claim)
        if node is None or node.stage != job.stage:
            return  # lost the lock or the row moved on (release, operator): drop the result
        assert isinstance(node, Node)
        release_lock(node)
        if isinstance(result, StepFailed):
            node.attempts += 1
            node.last_error = str(result)
            if result.retryable and node.attempts < p.settings.max_attempts:
                node.next_attempt_at = now + timedelta(seconds=backoff(p, node.attempts))
                record_event(s, now, "node", node.id, "error", instance_id=node.instance_id,
                             to_value=job.stage, message=f"attempt {node.attempts}: {result}")
                return
            tries = f" after {node.attempts} attempts" if result.retryable else ""
            fail_node(s, p, node, f"{job.stage} failed{tries}: {result}", now)
            return
        if result.ip_address:
            node.ip_address = result.ip_address
        if result.report is not None:
            report_id = record_acceptance(s, node, node.instance_id, result.report,
                                          "delivery", now)
            if not result.report.passed:
                fail_node(s, p, node, failure_reason(result.report, report_id), now)
                p.wake()
                return
        if result.certificates:
            unverified = record_certificates(s, node.id, node.instance_id,
                                             result.certificates, now)
            if unverified:
                fail_node(s, p, node, f"erase verification failed on "
                                      f"{', '.join(unverified)}", now)
                p.wake()
                return
        if result.outcome is Outcome.WAIT:
            node.stage_polls = (node.stage_polls or 0) + 1
            node.next_attempt_at = now + timedelta(seconds=p.settings.poll_interval_s)
            return
        if result.note:
            record_event(s, now, "node", node.id, "result", instance_id=node.instance_id,
                         to_value=job.stage, message=result.note)
        order = DEPLOY_STAGES if node.status == NodeStatus.DEPLOYING.value else CLEAN_STAGES
        position = order.index(job.stage)
        if position + 1 < len(order):
            enter_stage(s, node, order[position + 1], now, p.settings.stage_timeout_s,
                        node.instance_id)
            node.next_attempt_at = now
        else:
            _finish_node(s, p, node, now)
    p.wake()


def _finish_node(s: Session, p: Platform, node: Node, now: datetime) -> None:
    instance_id = node.instance_id
    drop_config_drives(s, node.id)  # installed (or cleaned): the secrets in it are spent
    enter_stage(s, node, None, now, 0)
    node.next_attempt_at = None
    if node.status == NodeStatus.DEPLOYING.value:
        switch_node_status(s, node, NodeStatus.ACTIVE, now)
    else:
        release_allocations(s, node.id, now)
        node.instance_id = None
        node.ip_address = None
        node.generation += 1
        if node.drain_requested_at is not None:
            switch_node_status(s, node, NodeStatus.MAINTENANCE, now, "drained by operator")
        else:
            switch_node_status(s, node, NodeStatus.AVAILABLE, now)
    wake_instance(s, instance_id, now)


def fail_node(s: Session, p: Platform, node: Node, reason: str, now: datetime) -> None:
    """A step failed for good: the node needs an operator. It goes to maintenance with the
    reason and lets go of its instance. During delivery the order moves to a free node of
    the same offer (same fabric for a cluster) when there is one; else it fails with the
    reason."""
    instance_id = node.instance_id
    was_cleaning = node.status == NodeStatus.CLEANING.value
    drop_config_drives(s, node.id)
    enter_stage(s, node, None, now, 0)
    node.next_attempt_at = None
    if was_cleaning:
        reason = f"cleaning not finished, disks not certified erased: {reason}"
    switch_node_status(s, node, NodeStatus.MAINTENANCE, now, reason)
    release_allocations(s, node.id, now)
    node.instance_id = None
    node.generation += 1
    inst = s.get(Instance, instance_id) if instance_id and not was_cleaning else None
    delivering = inst is not None and inst.status in (InstanceStatus.PENDING.value,
                                                      InstanceStatus.DEPLOYING.value)
    if inst is not None and delivering and not _move_to_spare(s, p, inst, node, reason, now):
        switch_instance_status(s, inst, InstanceStatus.FAILED, now, f"node {node.name}: {reason}")
        inst.stage = "failed"
    wake_instance(s, instance_id, now)


def _move_to_spare(s: Session, p: Platform, inst: Instance, failed: Node, reason: str,
                   now: datetime) -> bool:
    from gpulease.services.placement import claim_replacement

    moves = s.scalar(select(func.count()).select_from(Event).where(
        Event.resource == "instance", Event.resource_id == inst.id, Event.to_value == "moved"))
    if (moves or 0) >= p.settings.max_node_moves:
        return False
    spare = claim_replacement(s, now, inst, failed)
    if spare is None:
        return False
    record_event(s, now, "instance", inst.id, "stage", instance_id=inst.id, to_value="moved",
                 message=f"node {failed.name} failed ({reason}); continuing on {spare.name}")
    if inst.status == InstanceStatus.DEPLOYING.value:
        switch_node_status(s, spare, NodeStatus.DEPLOYING, now)
        enter_stage(s, spare, DeployStage.POWER_OFF.value, now, p.settings.stage_timeout_s,
                    inst.id)
        spare.next_attempt_at = now
    return True


def _interrupted_unsafe(s: Session, p: Platform, node: Node, step: str | None) -> None:
    """The previous owner died inside a step that is not safe to repeat: fail the deploy
    with a reason and clean the node rather than guess what the step left behind."""
    now = p.clock.now()
    release_lock(node)
    reason = (f"deploy interrupted during {step} (worker lost); the step is not safe to repeat, "
              "so the node is being cleaned")
    record_event(s, now, "node", node.id, "error", instance_id=node.instance_id,
                 to_value=step, message=reason)
    inst = s.get(Instance, node.instance_id) if node.instance_id else None
    drop_config_drives(s, node.id)
    switch_node_status(s, node, NodeStatus.CLEANING, now, reason)
    enter_stage(s, node, CleanStage.SHUTDOWN.value, now, p.settings.stage_timeout_s,
                node.instance_id)
    node.next_attempt_at = now
    if inst is not None and inst.status in (InstanceStatus.PENDING.value,
                                            InstanceStatus.DEPLOYING.value):
        switch_instance_status(s, inst, InstanceStatus.FAILED, now, f"node {node.name}: {reason}")
        inst.stage = "failed"
        inst.next_attempt_at = now


def start_cleaning(s: Session, p: Platform, node: Node, now: datetime, reason: str) -> None:
    """Called by the instance reconciler (which holds the instance lock): takes the node
    from any worker mid-step (its guarded write will then match nothing)."""
    release_lock(node)
    drop_config_drives(s, node.id)
    switch_node_status(s, node, NodeStatus.CLEANING, now, reason)
    enter_stage(s, node, CleanStage.SHUTDOWN.value, now, p.settings.stage_timeout_s,
                node.instance_id)
    node.next_attempt_at = now


# --------------------------------------------------------------------------- instances
def process_instance(p: Platform, claim: Claim) -> None:
    with p.db.write() as s:
        inst = _guarded(s, Instance, claim)
        if inst is None:
            return
        assert isinstance(inst, Instance)
        ending = inst.status in (InstanceStatus.RELEASING.value, InstanceStatus.FAILED.value)
        held = _held_container_nodes(s, inst) if inst.kind == "container" and ending else []
        if inst.kind == "container" and inst.status == InstanceStatus.PENDING.value:
            spec = _container_spec(s, p, inst)
            inst.step_in_progress = "container_start"
        elif held:
            inst.step_in_progress = "container_stop"
        else:
            _reconcile_instance(s, p, inst)
            return
    if held:
        _stop_containers(p, claim, held)
        return
    try:
        handle = p.drivers.runtime_for(spec.engine_url).start(spec)
        error: StepFailed | None = None
    except Exception as exc:
        error = StepFailed(f"{type(exc).__name__}: {exc}", bool(getattr(exc, "retryable", True)))
    now = p.clock.now()
    with p.db.write() as s:
        inst = _guarded(s, Instance, claim)
        if inst is None or inst.status != InstanceStatus.PENDING.value:
            return
        assert isinstance(inst, Instance)
        release_lock(inst)
        if error is None:
            inst.ip_address, inst.ssh_port = handle.ip_address, handle.ssh_port
            _mark_ready(s, p, inst, now)
        else:
            inst.attempts += 1
            inst.last_error = str(error)
            if error.retryable and inst.attempts < p.settings.max_attempts:
                inst.next_attempt_at = now + timedelta(seconds=backoff(p, inst.attempts))
            else:
                switch_instance_status(s, inst, InstanceStatus.FAILED, now,
                                       f"container start failed: {error}")
                inst.stage = "failed"
                inst.next_attempt_at = now


def _container_spec(s: Session, p: Platform, inst: Instance) -> ContainerSpec:
    (node, gpus, _held), = instance_allocations(s, inst.id)
    return ContainerSpec(instance_id=inst.id, node_name=node.name, gpu_indices=tuple(gpus),
                         image_id=inst.image_id, ssh_keys=tuple(inst.ssh_keys.splitlines()),
                         engine_url=node.runtime_url,
                         root_password=p.box.open(inst.root_password_enc)
                         if inst.root_password_enc else None)


def _mark_ready(s: Session, p: Platform, inst: Instance, now: datetime) -> None:
    switch_instance_status(s, inst, InstanceStatus.READY, now)
    inst.ready_at = now
    credit_late_delivery(s, inst, now, p.settings.delivery_sla_s)
    enter_stage(s, inst, "ready", now, 0, inst.id)
    inst.stage_deadline = None
    inst.next_attempt_at = None


def _reconcile_instance(s: Session, p: Platform, inst: Instance) -> None:
    now = p.clock.now()
    release_lock(inst)
    poll = now + timedelta(seconds=max(p.settings.poll_interval_s * 4, 1.0))
    nodes = bound_nodes(s, inst.id, lock=True)
    status = InstanceStatus(inst.status)

    if status is InstanceStatus.PENDING:
        enter_stage(s, inst, "deploying", now, p.settings.stage_timeout_s, inst.id)
        for node in nodes:
            if node.status == NodeStatus.ALLOCATED.value:
                switch_node_status(s, node, NodeStatus.DEPLOYING, now)
                enter_stage(s, node, DeployStage.POWER_OFF.value, now,
                            p.settings.stage_timeout_s, inst.id)
                node.next_attempt_at = now
        switch_instance_status(s, inst, InstanceStatus.DEPLOYING, now)
        inst.next_attempt_at = poll
        p.wake()
    elif status is InstanceStatus.DEPLOYING:
        if len(nodes) == inst.node_count and all(
            n.status == NodeStatus.ACTIVE.value for n in nodes
        ):
            inst.ip_address = nodes[0].ip_address
            inst.ssh_port = 22
            _mark_ready(s, p, inst, now)
        else:
            inst.next_attempt_at = poll  # nodes wake us; this is the safety net
    elif status in (InstanceStatus.RELEASING, InstanceStatus.FAILED):
        reason = "released by tenant" if status is InstanceStatus.RELEASING else (
            "instance failed: erasing before reuse")
        if inst.kind == "container":
            nodes = []  # its GPUs were freed once its container stopped
        for node in nodes:
            if node.status in (NodeStatus.ALLOCATED.value, NodeStatus.DEPLOYING.value,
                               NodeStatus.ACTIVE.value):
                start_cleaning(s, p, node, now, reason)
                p.wake()
        if nodes:
            if status is InstanceStatus.RELEASING and inst.stage != "cleaning":
                enter_stage(s, inst, "cleaning", now, p.settings.stage_timeout_s, inst.id)
            inst.next_attempt_at = poll
        else:
            if status is InstanceStatus.RELEASING:
                switch_instance_status(s, inst, InstanceStatus.RELEASED, now)
                inst.released_at = now
                enter_stage(s, inst, "released", now, 0, inst.id)
                inst.stage_deadline = None
            inst.root_password_enc = None
            inst.next_attempt_at = None
    else:  # READY or RELEASED: nothing to drive
        inst.next_attempt_at = None


def _held_container_nodes(s: Session, inst: Instance) -> list[tuple[str, str, str | None]]:
    """(node id, name, engine URL) of the shared nodes where the instance still holds GPUs."""
    rows = s.execute(select(GpuAllocation.node_id, Node.name, Node.runtime_url).distinct()
                     .join(Node, Node.id == GpuAllocation.node_id)
                     .where(GpuAllocation.instance_id == inst.id,
                            GpuAllocation.released_at.is_(None)))
    return [(node_id, name, url) for node_id, name, url in rows]


def _stop_containers(p: Platform, claim: Claim, held: list[tuple[str, str, str | None]]) -> None:
    """Stop the instance's container outside any transaction, then free its GPUs and
    finish the release. A runtime that fails keeps the GPUs held and is retried."""
    error: StepFailed | None = None
    try:
        for _node_id, name, url in held:
            p.drivers.runtime_for(url).stop(claim.id, name, url)
    except Exception as exc:
        error = StepFailed(f"{type(exc).__name__}: {exc}", True)
    now = p.clock.now()
    with p.db.write() as s:
        inst = _guarded(s, Instance, claim)
        if inst is None:
            return
        assert isinstance(inst, Instance)
        if error is not None:
            release_lock(inst)
            inst.attempts += 1
            inst.last_error = f"container stop failed: {error}"
            inst.next_attempt_at = now + timedelta(seconds=backoff(p, inst.attempts))
            return
        for node_id, _name, _url in held:
            release_allocations(s, node_id, now, inst.id)
        _reconcile_instance(s, p, inst)


# --------------------------------------------------------------------------- periodics
def sweep_timeouts(p: Platform, owner: str) -> int:
    """Fail rows whose stage outlived its deadline (only unlocked or expired rows)."""
    now = p.clock.now()
    claims = claim_due(
        p, Node, owner, limit=50, due=False,
        extra=[Node.status.in_([NodeStatus.DEPLOYING.value, NodeStatus.CLEANING.value]),
               Node.stage_deadline < now],
    )
    for claim in claims:
        with p.db.write() as s:
            node = s.scalar(select(Node).where(Node.id == claim.id))
            instance_id = node.instance_id if node else None
            _lock_instance_first(s, instance_id)
            node = _guarded(s, Node, claim)
            if node is None:
                continue
            assert isinstance(node, Node)
            release_lock(node)
            timeout = p.settings.stage_timeout_s
            fail_node(s, p, node, f"stage {node.stage} timed out after {timeout:.0f} s", now)
    if claims:
        p.wake()
    return len(claims)
