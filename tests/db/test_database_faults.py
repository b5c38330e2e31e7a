"""The worker when the database fails under it: a connection cut while a step's result is
being applied, and a frozen worker holding row locks. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from gpulease.compose import make_platform
from gpulease.demo import seed_demo_fleet
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import place
from gpulease.testing.platforms import PG_URL, SECRET, make_settings
from gpulease.worker.pipelines import node_steps
from gpulease.worker.pipelines.node_steps import StepInput, StepResult
from gpulease.worker.runner import Worker


class ConnectionCutter:
    """Cuts the database connection under the next statement `match` accepts, once armed,
    as a network failure or a restarted server would: on PostgreSQL the server ends the
    session (pg_terminate_backend from another connection) and the statement fails on the
    dead socket; on SQLite the driver's I/O error is raised."""

    def __init__(self, p: Platform, match: Callable[[str], bool]) -> None:
        self.match, self.armed, self.cuts = match, False, 0
        event.listen(p.db.engine, "before_cursor_execute", self._before)

    def _before(self, conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if not self.armed or not self.match(statement):
            return
        self.armed = False
        self.cuts += 1
        if conn.dialect.name == "postgresql":
            pid = conn.connection.dbapi_connection.info.backend_pid
            with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return
        raise OperationalError(statement, params, sqlite3.OperationalError("disk I/O error"))


def test_a_connection_cut_while_applying_a_result_is_retried_with_the_result_in_hand(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step (here `configure`, which is not safe to repeat) ran; only writing its result
    failed. The result is applied on a fresh connection: the order is delivered, not failed
    as "worker lost" with its node erased."""
    guarded_read = ConnectionCutter(fleet, lambda sql: "FROM nodes" in sql
                                    and "lock_token" in sql)
    configure = node_steps.STEPS["configure"]

    def configure_then_cut(p: Platform, job: StepInput) -> StepResult:
        result = configure(p, job)
        guarded_read.armed = True  # the apply's first statement loses its connection
        return result

    monkeypatch.setitem(node_steps.STEPS, "configure", configure_then_cut)
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert guarded_read.cuts == 1
    assert view.status == "ready", view.status_reason
    assert not [st for st in view.stages if "worker lost" in (st.message or "")]
    assert [st.stage for st in view.stages].count("configure") == 1  # ran once


FROZEN_WORKER = """
import os, signal
from sqlalchemy import select
from gpulease.db.tables import Instance, Node
from gpulease.compose import make_platform
from gpulease.settings import Settings
from gpulease.worker.pipelines.base import claim_due

p = make_platform(Settings())
(claim,) = claim_due(p, Instance, "frozen-worker", limit=1)
with p.db.write() as s:  # inside a step's transaction, row locks held...
    s.execute(select(Instance.id).where(Instance.id == claim.id).with_for_update()).all()
    s.execute(select(Node.id).where(Node.instance_id == claim.id).with_for_update()).all()
    print("frozen", claim.id, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # ...when the process stops (SIGSTOP, a hung NFS)
"""
LOCK_TTL_S = 3.0
IDLE_IN_TRANSACTION_S = 1.5


@pytest.fixture
def quick_locks(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(make_settings(
        db_url, tmp_path / "data", lock_ttl_s=LOCK_TTL_S, db_lock_timeout_s=1.0,
        db_idle_in_transaction_timeout_s=IDLE_IN_TRANSACTION_S))
    p.db.migrate()
    seed_demo_fleet(p, 1)
    yield p
    p.db.dispose()


@pytest.mark.slow
def test_a_frozen_worker_holding_row_locks_is_taken_over_within_the_lock_ttl(
    quick_locks: Platform, key: str
) -> None:
    p = quick_locks
    if p.db.dialect == "sqlite":
        pytest.skip("SQLite has one writer at a time and no server to end a frozen "
                    "session: a frozen writer holds the write lock (docs/operations.md)")
    tenant = new_tenant(p)
    iid = place(p, tenant, key)
    env = os.environ | {"GPULEASE_DATABASE_URL": p.settings.database_url,
                        "GPULEASE_SECRET_KEY": SECRET,
                        "GPULEASE_DATA_DIR": str(p.settings.data_dir),
                        "GPULEASE_LOCK_TTL_S": str(LOCK_TTL_S),
                        "GPULEASE_DB_IDLE_IN_TRANSACTION_TIMEOUT_S": str(IDLE_IN_TRANSACTION_S)}
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN_WORKER], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert frozen.stdout is not None
        assert frozen.stdout.readline().split() == ["frozen", iid], frozen.stderr
        began = time.monotonic()
        worker = Worker(p, owner="live-worker")
        worker.start(2)
        try:
            deadline = began + LOCK_TTL_S + 15
            while instances.show_instance(p, tenant.principal, iid).status != "ready":
                assert time.monotonic() < deadline, (
                    "the frozen worker's rows were not taken over: "
                    f"{instances.show_instance(p, tenant.principal, iid).status}")
                time.sleep(0.05)
            took = time.monotonic() - began
        finally:
            worker.stop()
    finally:
        frozen.kill()
        frozen.wait(10)
    # The server ended the frozen session after IDLE_IN_TRANSACTION_S, so its row locks went
    # first; its pipeline lock expired after LOCK_TTL_S; then the live worker delivered.
    assert took < LOCK_TTL_S + 8, took
