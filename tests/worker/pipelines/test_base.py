"""The pipeline base on SQLite and PostgreSQL: a step claims a due row and lets it go; a
row another worker holds is left alone until its lock expires; the heartbeat keeps live
claims; a result whose database stays away is given up once a lock would have expired."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError, ProgrammingError

from gpulease.db.claims import guarded
from gpulease.db.tables import Instance
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import LeapingClock
from gpulease.testing.factories import place
from gpulease.worker.pipelines import instances
from gpulease.worker.pipelines.base import (
    LockRegistry,
    apply_with_retry,
    backoff,
    claim_due,
    drive,
    heartbeat,
    pending,
)


def _lock(p: Platform, iid: str) -> tuple[str | None, str | None]:
    with p.db.read() as s:
        row = s.execute(select(Instance.lock_token, Instance.lock_owner)
                        .where(Instance.id == iid)).one()
    return row[0], row[1]


def test_a_step_claims_a_due_row_and_lets_it_go(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    assert drive(fleet, instances.PIPELINE) == 0 and not pending(fleet, instances.PIPELINE)
    iid = place(fleet, tenant, key)
    assert pending(fleet, instances.PIPELINE)
    assert drive(fleet, instances.PIPELINE) == 1  # pending -> deploying
    with fleet.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.status == "deploying"
    assert _lock(fleet, iid) == (None, None)


def test_a_held_row_waits_for_its_lock_to_expire(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    fleet.clock = clock = LeapingClock()
    iid = place(fleet, tenant, key)
    (held,) = claim_due(fleet, Instance, "another-worker")
    assert held.id == iid and _lock(fleet, iid)[1] == "another-worker"
    assert drive(fleet, instances.PIPELINE, owner="me") == 0
    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s + 1)
    assert drive(fleet, instances.PIPELINE, owner="me") == 1  # taken over
    with fleet.db.write() as s:
        assert guarded(s, Instance, held) is None  # the old holder writes nothing


def test_the_heartbeat_keeps_a_live_claim(fleet: Platform, tenant: TenantCtx, key: str
                                          ) -> None:
    fleet.clock = clock = LeapingClock()
    iid = place(fleet, tenant, key)
    (held,) = claim_due(fleet, Instance, "alive")
    locks = LockRegistry()
    locks.add(held)
    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s * 0.9)
    heartbeat(fleet, locks)
    clock.leap += timedelta(seconds=fleet.settings.lock_ttl_s * 0.9)
    assert drive(fleet, instances.PIPELINE, owner="thief") == 0  # still alive
    assert _lock(fleet, iid)[1] == "alive"


def test_a_result_is_retried_while_the_lock_lives_then_given_up(platform: Platform) -> None:
    platform.settings.lock_ttl_s = 0.3
    tries = []

    def refused() -> None:
        tries.append(time.monotonic())
        raise OperationalError("UPDATE", {}, Exception("server closed the connection"))

    assert apply_with_retry(platform, "a step", refused) is False
    assert len(tries) >= 2 and tries[-1] - tries[0] <= 0.3 + 0.1
    done: list[int] = []
    assert apply_with_retry(platform, "a step", lambda: done.append(1)) is True

    def wrong() -> None:
        raise ProgrammingError("UPDATE", {}, Exception("syntax error at or near"))

    with pytest.raises(ProgrammingError):  # not the database away: raised at once
        apply_with_retry(platform, "a step", wrong)


def test_backoff_grows_within_its_cap(platform: Platform) -> None:
    platform.settings.backoff_base_s, platform.settings.backoff_max_s = 1.0, 8.0
    for attempts, cap in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)):
        delay = backoff(platform, attempts)
        assert cap / 2 <= delay <= cap


def test_the_heartbeat_never_holds_a_node_while_it_waits_for_an_instance(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """A worker holding an instance and its node beats for both while a step holds the
    instance and then locks the node: the heartbeat extends one row a transaction, so it
    waits for the instance holding nothing, and the step gets its node (extending both in
    one transaction, nodes first, deadlocked on PostgreSQL)."""
    if fleet.db.dialect != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    import threading

    from sqlalchemy import text, update

    from gpulease.db.claims import Claim
    from gpulease.db.tables import Node

    iid = place(fleet, tenant, key)
    with fleet.db.write() as s:  # worker w holds the instance and its node
        row = s.scalar(select(Node).where(Node.instance_id == iid))
        assert row is not None
        row.lock_token, row.lock_owner = "token-node", "w"
        s.execute(update(Instance).where(Instance.id == iid).values(
            lock_token="token-inst", lock_owner="w"))
        node = Claim(Node, row.id, "token-node", taken_over=False)
    inst = Claim(Instance, iid, "token-inst", taken_over=False)
    beats: list[bool] = []
    for first in (Node, Instance, Node):  # whichever table the heartbeat took first
        locks = LockRegistry()
        for held in ((node, inst) if first is Node else (inst, node)):
            locks.add(held)
        beat = threading.Thread(target=lambda locks=locks: beats.append(
            heartbeat(fleet, locks) is None))
        with fleet.db.write() as s:  # the step: the instance first...
            s.execute(select(Instance.id).where(Instance.id == iid).with_for_update())
            beat.start()
            time.sleep(0.5)
            s.execute(text("SET LOCAL lock_timeout = '10s'"))
            s.execute(select(Node.id).where(Node.id == node.id).with_for_update())  # ...node
        beat.join(30)
    assert beats == [True, True, True]
