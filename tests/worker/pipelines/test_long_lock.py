"""A row lock longer than the lock TTL during a step (a DBA's open transaction, a
migration) does not fail a healthy order: the step's result is retried until the step's own
deadline, and a live worker's row left mid-step is not taken from it as if it had crashed.
PostgreSQL (SQLite has one writer: a long lock there stops everything alike)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from gpulease.compose import make_platform
from gpulease.db.tables import Instance, Node
from gpulease.demo import seed_demo_fleet
from gpulease.drivers.simulated import SimulatedAgent
from gpulease.platform import Platform
from gpulease.ports.agent import ConfigureResult, NodeConfig, NodeRef
from gpulease.services.platform import workers
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.testing.factories import node_by_name, node_name_of, place
from gpulease.testing.platforms import database_url, make_settings, start_migrated
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines import nodes as node_pipeline
from gpulease.worker.pipelines.base import drive


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """PostgreSQL only: SQLite's one writer makes any long lock a full stop alike."""
    with database_url("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def quick_locks(pg_url: str, tmp_path: Path) -> Iterator[Platform]:
    """A lock TTL of 1 s and row-lock waits of 0.3 s: the apply fails fast and retries."""
    start_migrated(pg_url)
    p = make_platform(make_settings(pg_url, tmp_path / "data", lock_ttl_s=1.0,
                                    db_lock_timeout_s=0.3, stage_timeout_s=120.0))
    p.db.migrate()
    seed_demo_fleet(p, 2)
    yield p
    p.close()


def test_a_long_row_lock_during_configure_fails_no_healthy_order(
        quick_locks: Platform, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = quick_locks
    tenant = new_tenant(p)
    iid = place(p, tenant, ssh_key())
    drive(p, instance_pipeline.PIPELINE)
    name = node_name_of(p, tenant, iid)
    deadline = time.monotonic() + 30
    while node_by_name(p, name).stage != "configure":  # bounded: 30 s
        assert time.monotonic() < deadline, node_by_name(p, name).stage
        drive(p, node_pipeline.PIPELINE, owner="a")
        time.sleep(0.02)

    in_step, locked = threading.Event(), threading.Event()
    real = SimulatedAgent.configure

    def configure(self: SimulatedAgent, node: NodeRef, config: NodeConfig) -> ConfigureResult:
        done = real(self, node, config)
        in_step.set()
        locked.wait(30)  # the row is locked by someone else before the result is written
        return done

    monkeypatch.setattr(SimulatedAgent, "configure", configure)
    workers.register(p, "a", 1)  # worker A is alive all along (its registry heartbeat)
    a = threading.Thread(target=drive, args=(p, node_pipeline.PIPELINE),
                         kwargs={"owner": "a", "limit": 1})
    a.start()
    assert in_step.wait(30)
    outside = create_engine(pg_url)
    with outside.connect() as dba:
        dba.execute(text("SELECT id FROM nodes WHERE name = :n FOR UPDATE"), {"n": name})
        locked.set()
        for _ in range(12):  # 3 s: three lock lives; A keeps its registry heartbeat
            time.sleep(0.25)
            workers.seen(p, "a", 0)
        dba.rollback()  # the long lock ends
    outside.dispose()
    workers.seen(p, "a", 0)
    drive(p, node_pipeline.PIPELINE, owner="b")  # B does not take A's step as a crash
    a.join(30)
    node = node_by_name(p, name)  # A's configure was applied: the deploy went on (B may go on)
    assert node.status in ("deploying", "active") and node.ip_address, (
        node.stage, node.status, node.status_reason)
    assert node.stage in ("verify", "detach_media", None), node.stage
    with p.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.status in ("deploying", "ready"), inst.status_reason


def test_a_live_workers_row_left_mid_step_is_not_taken_a_dead_ones_is(
        fleet: Platform) -> None:
    """The claim's rule itself: an expired lock with a step under way is taken over only
    when its owner is not alive in the worker registry (or is the claimer itself)."""
    from datetime import timedelta

    from gpulease.db.claims import Hold, begin_step, claim

    with fleet.db.read() as s:
        node_id = s.scalar(select(Node.id).limit(1))
    now = fleet.clock.now()
    ttl = timedelta(seconds=1)
    (held,) = claim(fleet.db, Node, Hold("a", now, ttl), [Node.id == node_id])
    with fleet.db.write() as s:
        row = s.get(Node, node_id)
        assert row is not None
        begin_step(row, "configure")  # A is inside the step when its lock runs out
    workers.register(fleet, "a", 1)  # seen now
    later = now + timedelta(seconds=5)  # A's lock has run out
    alive_since = now - timedelta(seconds=1)  # and A was seen since: alive
    assert claim(fleet.db, Node, Hold("b", later, ttl, alive_since), [Node.id == node_id]) == []
    (again,) = claim(fleet.db, Node, Hold("a", later, ttl, alive_since), [Node.id == node_id])
    assert again.taken_over  # its own row, after a step of its own that raised
    with fleet.db.write() as s:
        row = s.get(Node, node_id)
        assert row is not None
        begin_step(row, "configure")
    much_later = later + timedelta(minutes=5)  # A's registry heartbeat stopped: dead
    (taken,) = claim(fleet.db, Node, Hold("b", much_later, ttl,
                                          much_later - timedelta(seconds=3)),
                     [Node.id == node_id])
    assert taken.taken_over and held.token != taken.token
