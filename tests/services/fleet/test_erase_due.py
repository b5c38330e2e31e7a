"""Erase is an invariant, not a step: a node that held a tenant's data joins the pool only
through a certified erase since. A failed clean leaves it in maintenance still marked;
`node resume` then erases it first (and the next tenant never gets the first one's data);
no move into `available` passes the mark, whatever the event; a set-based move into a
checked state cannot even be declared. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpulease.db.tables import EraseCertificate, Node
from gpulease.domain.lifecycle import EntryRefused
from gpulease.domain.states import NODE, NodeStatus
from gpulease.lifecycle.history import WORKER
from gpulease.lifecycle.writer import Move, bulk, transition
from gpulease.platform import Platform
from gpulease.services.fleet import inventory
from gpulease.services.instances import actions
from gpulease.testing.callers import TenantCtx, new_operator
from gpulease.testing.factories import node_by_name, node_name_of, place
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines.base import drive
from gpulease.worker.pipelines.node_outcomes import Failure, fail_node
from gpulease.worker.runner import Worker


def _failed_clean(p: Platform, tenant: TenantCtx, worker: Worker, key: str) -> str:
    """A tenant's server whose erase failed: in maintenance, disks not certified."""
    iid = place(p, tenant, key)
    worker.run_until_idle()
    name = node_name_of(p, tenant, iid)
    assert node_by_name(p, name).erase_due_since is not None  # bound: it may hold their data
    actions.release_instance(p, tenant.principal, iid)
    drive(p, instance_pipeline.PIPELINE)  # its node starts cleaning
    with p.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name).with_for_update())
        assert node is not None and node.status == NodeStatus.CLEANING
        fail_node(s, p, node, Failure("erase timed out", p.clock.now()))
    return name


def test_resume_erases_a_node_that_held_a_tenants_data_before_it_joins_the_pool(
        fleet: Platform, tenant: TenantCtx, worker: Worker, key: str) -> None:
    name = _failed_clean(fleet, tenant, worker, key)
    failed = node_by_name(fleet, name)
    assert failed.status == NodeStatus.MAINTENANCE and failed.erase_due_since is not None
    operator = new_operator(fleet)

    view = inventory.resume_node(fleet, operator.principal, failed.id)
    assert view.status == "cleaning"  # not available: erased first
    assert view.erase_due_since is not None
    assert "no certified erase" in (view.status_reason or "")
    worker.run_until_idle()
    erased = node_by_name(fleet, name)
    assert erased.status == NodeStatus.AVAILABLE and erased.erase_due_since is None
    with fleet.db.read() as s:
        passed = s.scalars(select(EraseCertificate.passed).where(
            EraseCertificate.node_id == erased.id,
            EraseCertificate.created_at >= failed.erase_due_since)).all()
    assert passed and all(passed)  # the erase that let it back in


def test_no_move_into_the_pool_passes_the_mark(
        fleet: Platform, tenant: TenantCtx, worker: Worker, key: str) -> None:
    name = _failed_clean(fleet, tenant, worker, key)
    with fleet.db.write() as s:
        node = s.scalar(select(Node).where(Node.name == name).with_for_update())
        assert node is not None
        with pytest.raises(EntryRefused, match="held a tenant's data"):
            transition(s, fleet, node, NODE, "resume", Move(fleet.clock.now(), actor=WORKER))
    assert node_by_name(fleet, name).status == NodeStatus.MAINTENANCE


def test_the_api_says_why_and_a_set_based_move_into_the_pool_cannot_be_declared(
        fleet: Platform, tenant: TenantCtx, worker: Worker, key: str) -> None:
    name = _failed_clean(fleet, tenant, worker, key)
    operator = new_operator(fleet)
    shown = inventory.get_node(fleet, operator.principal, node_by_name(fleet, name).id)
    assert shown.erase_due_since is not None and shown.status == "maintenance"
    with pytest.raises(ValueError, match="checks each row"):
        bulk(Node, NODE, "free")
