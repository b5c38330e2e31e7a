"""What a node step is given, read in the claiming transaction: the image and the keys of
its instance, the root password only in the stages that install it, the offer's marks in
verification; a deploy's config drive made once, and dropped (with its one-time agent
token) when the deploy ends."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import func, select, text

from gpulease.db.tables import AgentEnrollment, ConfigDrive, Instance, Node
from gpulease.domain.states import NodeStage
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_name_of, place
from gpulease.worker.pipelines import instances
from gpulease.worker.pipelines.base import drive
from gpulease.worker.pipelines.node_inputs import (
    drop_config_drives,
    make_config_drive,
    step_input,
)


def _deploying(p: Platform, t: TenantCtx, key: str) -> str:
    iid = place(p, t, key)
    drive(p, instances.PIPELINE)  # its node starts its deploy
    return node_name_of(p, t, iid)


def test_a_step_reads_what_its_stage_needs(fleet: Platform, tenant: TenantCtx, key: str
                                          ) -> None:
    name = _deploying(fleet, tenant, key)
    with fleet.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None and node.stage == NodeStage.POWER_OFF
        inst = s.get(Instance, node.instance_id)
        job = step_input(s, fleet, node, inst)
        assert job.ssh_keys == (key,) and job.root_password == ""  # not for power_off
        assert job.image_url.endswith(".iso") and job.acceptance is None
        # other stages set by hand, in a transaction rolled back: the inputs are the subject
        node.stage = NodeStage.CONFIGURE
        configure = step_input(s, fleet, node, inst)
        assert configure.root_password  # the stage that installs it reads it
        node.stage = NodeStage.VERIFY
        assert step_input(s, fleet, node, inst).acceptance is not None  # the offer's marks
        s.rollback()


def test_a_config_drive_is_made_once_and_dropped_with_its_token(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    name = _deploying(fleet, tenant, key)
    with fleet.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        job = step_input(s, fleet, node, s.get(Instance, node.instance_id))
    made = make_config_drive(fleet, job)
    assert made.config_drive_url and "/media/config/" in made.config_drive_url
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(ConfigDrive)) == 1
        assert s.scalar(select(func.count()).select_from(AgentEnrollment)) == 1
    with fleet.db.write() as s:
        drop_config_drives(s, job.node_id)
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(ConfigDrive)) == 0
        assert s.scalar(select(func.count()).select_from(AgentEnrollment)) == 0


def test_a_config_drive_is_stored_in_the_lock_order(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """Storing the drive share-locks its instance and node (the foreign keys): the
    instance first, so a step that holds the instance and then locks the node is waited for,
    never deadlocked with (13 deadlocks under ordinary load were this)."""
    if fleet.db.dialect != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    name = _deploying(fleet, tenant, key)
    with fleet.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        job = step_input(s, fleet, node, s.get(Instance, node.instance_id))
    made: list[str | None] = []
    store = threading.Thread(target=lambda: made.append(
        make_config_drive(fleet, job).config_drive_url))
    with fleet.db.write() as s:  # the instance step: the instance first...
        s.execute(select(Instance.id).where(Instance.id == job.instance_id).with_for_update())
        store.start()
        time.sleep(1.5)  # the drive is built and waits to be stored
        s.execute(text("SET LOCAL lock_timeout = '10s'"))
        s.execute(select(Node.id).where(Node.id == job.node_id).with_for_update())  # ...node
    store.join(30)
    assert len(made) == 1 and made[0]
