"""The instance pipeline: drive a claimed instance one step, the container runtime's I/O
outside any transaction (worker/pipelines/containers.py), the rest in one transaction
(worker/pipelines/instance_steps.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement

from gpulease.db.claims import Claim, begin_step, guarded
from gpulease.db.tables import Instance
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.worker.pipelines.base import Pipeline
from gpulease.worker.pipelines.containers import (
    container_spec,
    held_hosts,
    start_container,
    stop_containers,
)
from gpulease.worker.pipelines.instance_steps import reconcile


def process_instance(p: Platform, claim: Claim) -> None:
    with p.db.write() as s:
        inst: Instance | None = guarded(s, Instance, claim)
        if inst is None:
            return
        ending = inst.status in (InstanceStatus.RELEASING.value, InstanceStatus.FAILED.value)
        held = held_hosts(s, inst) if inst.kind == "container" and ending else []
        if inst.kind == "container" and inst.status == InstanceStatus.PENDING.value:
            spec = container_spec(s, p, inst)
            begin_step(inst, "container_start")
        elif held:
            begin_step(inst, "container_stop")
        else:
            reconcile(s, p, inst)
            return
    if held:
        stop_containers(p, claim, held)
    else:
        start_container(p, claim, spec)


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [Instance.next_attempt_at <= now]


PIPELINE = Pipeline("instances", Instance, _due, lambda now: _due(now)[0], process_instance,
                    region=Instance.region)
