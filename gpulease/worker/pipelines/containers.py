"""Container instances on shared servers: start the container (the instance is delivered
when it runs), and stop it when the instance is released or failed, then free its GPUs.
The runtime call runs outside any transaction, behind the fence (a worker that lost its
claim makes none); its result is applied under the row's lock token."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.claims import Claim, guarded, release
from gpulease.db.repositories import instance_allocations
from gpulease.db.tables import GpuAllocation, Instance, Node
from gpulease.domain.phrases import phrase
from gpulease.domain.states import InstanceStatus
from gpulease.lifecycle.binding import release_gpus
from gpulease.lifecycle.history import WORKER
from gpulease.platform import Platform
from gpulease.ports.runtime import ContainerHandle, ContainerLimits, ContainerSpec
from gpulease.services.storage.saved_images import reference_of
from gpulease.worker.pipelines.base import (
    StepFailed,
    apply_with_retry,
    backoff,
    step_failed,
)
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_runtime
from gpulease.worker.pipelines.instance_steps import deliver, reconcile
from gpulease.worker.pipelines.node_outcomes import fail_instance

HeldHost = tuple[str, str, str | None]  # (node id, name, engine URL)


def container_spec(s: Session, p: Platform, inst: Instance) -> ContainerSpec:
    (node, gpus, _held), = instance_allocations(s, inst.id)
    return ContainerSpec(instance_id=inst.id, node_name=node.name, gpu_indices=tuple(gpus),
                         image_id=inst.image_id, ssh_keys=tuple(inst.ssh_keys.splitlines()),
                         engine_url=node.runtime_url,
                         root_password=p.box.open(inst.root_password_enc)
                         if inst.root_password_enc else None,
                         tenant_id=inst.tenant_id, limits=container_limits(p, inst),
                         password_login=bool(inst.password_login),
                         image_ref=reference_of(s, inst))


def container_limits(p: Platform, inst: Instance) -> ContainerLimits:
    """The offer's per-GPU share of the host times the instance's GPUs; unlimited when the
    catalog no longer lists the offer (the container keeps running as it was ordered)."""
    if inst.container_offer is None or (
            inst.container_offer not in p.catalog.container_offer_by_id):
        return ContainerLimits()
    share = p.catalog.container_share(inst.container_offer, inst.gpu_count)
    return ContainerLimits(cpus=float(share.cpus), memory_bytes=share.memory_gb * 2**30,
                           pids=share.pids)


def held_hosts(s: Session, inst: Instance) -> list[HeldHost]:
    """The shared nodes where the instance still holds GPUs."""
    rows = s.execute(select(GpuAllocation.node_id, Node.name, Node.runtime_url).distinct()
                     .join(Node, Node.id == GpuAllocation.node_id)
                     .where(GpuAllocation.instance_id == inst.id,
                            GpuAllocation.released_at.is_(None)))
    return [(node_id, name, url) for node_id, name, url in rows]


def start_container(p: Platform, claim: Claim, spec: ContainerSpec) -> None:
    runtime = fenced_runtime(p.drivers.runtime_for(spec.engine_url), Fence(p, claim))
    try:
        result: ContainerHandle | StepFailed = runtime.start(spec)
    except Fenced:
        return  # taken over while this worker was away: the new holder starts it
    except Exception as exc:
        result = step_failed(exc)
    apply_with_retry(p, f"container start of {claim.id}",
                     lambda: _apply_start(p, claim, result))


def _apply_start(p: Platform, claim: Claim, result: ContainerHandle | StepFailed) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        inst: Instance | None = guarded(s, Instance, claim)
        if inst is None or inst.status != InstanceStatus.PENDING.value:
            return
        release(inst)
        if not isinstance(result, StepFailed):
            inst.ip_address, inst.ssh_port = result.ip_address, result.ssh_port
            deliver(s, p, inst, now)
            return
        inst.attempts += 1
        inst.last_error = str(result)
        if result.retryable and inst.attempts < p.settings.max_attempts:
            inst.next_attempt_at = now + timedelta(seconds=backoff(p, inst.attempts))
        else:
            fail_instance(s, p, inst, phrase("container start failed: {error}",
                                             error=str(result)), now, WORKER)


def stop_containers(p: Platform, claim: Claim, held: list[HeldHost]) -> None:
    """Stop the instance's container outside any transaction, then free its GPUs and
    finish the release. A runtime that fails keeps the GPUs held and is retried."""
    error: StepFailed | None = None
    fence = Fence(p, claim)
    try:
        for _node_id, name, url in held:
            fenced_runtime(p.drivers.runtime_for(url), fence).stop(claim.id, name, url)
    except Fenced:
        return  # taken over while this worker was away: the new holder stops it
    except Exception as exc:
        error = StepFailed(f"{type(exc).__name__}: {exc}", True)
    apply_with_retry(p, f"container stop of {claim.id}",
                     lambda: _apply_stop(p, claim, held, error))


def _apply_stop(p: Platform, claim: Claim, held: list[HeldHost], error: StepFailed | None
                ) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        inst: Instance | None = guarded(s, Instance, claim)
        if inst is None:
            return
        if error is not None:
            release(inst)
            inst.attempts += 1
            inst.last_error = f"container stop failed: {error}"
            inst.next_attempt_at = now + timedelta(seconds=backoff(p, inst.attempts))
            return
        for node_id, _name, _url in held:
            release_gpus(s, node_id, now, inst.id)
        reconcile(s, p, inst)
