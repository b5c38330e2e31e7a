"""SIGKILL a real worker process inside each deploy stage in turn, restart it, and check
that nothing is left stuck (both databases: every stage is killed on one of them — SQLite
takes every other stage from the first, PostgreSQL the rest — and the other tests here run
whole on both)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.states import DEPLOY_ORDER, UNSAFE_TO_REPEAT, NodeStatus
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.orders import ordering as orders
from gpulease.services.support.replacement import Swap
from gpulease.testing.callers import TenantCtx
from gpulease.testing.platforms import SECRET

pytestmark = pytest.mark.slow

LOCK_TTL = 1.0
STAGE_TIMEOUT = 20.0


def start_worker(p: Platform) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "GPULEASE_DATABASE_URL": p.settings.database_url,
        "GPULEASE_SECRET_KEY": SECRET,
        "GPULEASE_LOCK_TTL_S": str(LOCK_TTL),
        "GPULEASE_POLL_INTERVAL_S": "0.02",
        "GPULEASE_STAGE_TIMEOUT_S": str(STAGE_TIMEOUT),
        "GPULEASE_DEMO_DELAY_S": "0.1",
        "GPULEASE_SIMULATED_HARDWARE": "true",  # the demo fleet's drivers
        # every simulated BMC/agent call takes this long, so the kill lands inside a step
        "GPULEASE_DEMO_CALL_LATENCY_S": "0.15",
        "GPULEASE_BACKOFF_BASE_S": "0.05",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", "worker", "--data-dir",
         str(p.settings.data_dir), "--threads", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def node_of(p: Platform, iid: str) -> Node | None:
    with p.db.read() as s:
        return s.scalar(select(Node).where(Node.instance_id == iid))


def moved_because(p: Platform, iid: str) -> str:
    """Why the order moved to a spare, if it did."""
    with p.db.read() as s:
        return " ".join(e.message or "" for e in s.scalars(select(Event).where(
            Event.resource == "instance", Event.resource_id == iid,
            Event.to_value == "moved")))


def instance(p: Platform, iid: str) -> Instance:
    with p.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None
        return inst


def test_sigkill_in_every_deploy_stage_leaves_nothing_stuck(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    offers = list(fleet.catalog.offers)
    results: dict[str, tuple[str, str, str | None]] = {}
    half = 0 if fleet.db.url.startswith("sqlite") else 1
    stages = [st.value for st in DEPLOY_ORDER][half::2]
    worker = start_worker(fleet)
    try:
        for n, stage in enumerate(stages):
            offer = offers[n % len(offers)]
            req = OrderRequest(sku=offer.sku, region=offer.region, ssh_keys=[key])
            iid = orders.place_order(fleet, tenant.principal, req)[0].id

            def in_stage(iid: str = iid, stage: str = stage) -> bool:
                node = node_of(fleet, iid)
                return node is not None and node.step_in_progress == stage

            wait_for(in_stage, 30, f"{iid} inside {stage}")
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            worker = start_worker(fleet)
            wait_for(lambda iid=iid: instance(fleet, iid).status in ("ready", "failed"),
                     LOCK_TTL + STAGE_TIMEOUT + 10, f"{iid} to settle after kill in {stage}")
            inst = instance(fleet, iid)
            results[stage] = (iid, inst.status, inst.status_reason)
        # cleaning of failed deploys finishes too
        wait_for(lambda: not _nodes_in(fleet, NodeStatus.CLEANING), 30, "cleaning to finish")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()

    for seen, (iid, status, reason) in results.items():
        # the kill lands where the worker is when the signal arrives, which may be the
        # step after the one this test saw: judge by the step the reason (or the order's
        # move to a spare) names
        said = f"{reason or ''} {moved_because(fleet, iid)}"
        hit = re.search(r"interrupted during (\w+)", said)
        stage = hit.group(1) if hit else seen
        if stage in UNSAFE_TO_REPEAT:  # not repeated there: on a spare, or failed
            assert "not safe to repeat" in said, said
            assert status == "failed" or "interrupted during" in moved_because(fleet, iid)
        else:
            assert status == "ready", (stage, status, reason)
    with fleet.db.read() as s:
        for node in s.scalars(select(Node)):
            if node.status in (NodeStatus.ALLOCATED, NodeStatus.DEPLOYING, NodeStatus.ACTIVE):
                assert node.instance_id is not None, node.name
                inst = s.get(Instance, node.instance_id)
                assert inst is not None and inst.status == "ready", (node.name, inst)
            else:
                assert node.instance_id is None, (node.name, node.status)
            assert node.lock_token is None or node.lock_expires_at is not None


def _nodes_in(p: Platform, status: NodeStatus) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(Node.name).where(Node.status == status.value)))


def test_worker_process_runs_an_order_to_ready(
    fleet: Platform, tenant: TenantCtx, key: str, tmp_path: Path
) -> None:
    worker = start_worker(fleet)
    try:
        req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key])
        iid = orders.place_order(fleet, tenant.principal, req)[0].id
        wait_for(lambda: instance(fleet, iid).status == "ready", 30, "ready")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0  # a clean stop on SIGTERM


def test_two_worker_processes_share_the_work_without_stepping_on_each_other(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    from gpulease.db.tables import Event

    workers = [start_worker(fleet), start_worker(fleet)]
    try:
        ids = []
        for offer in fleet.catalog.offers:
            kind = "cluster" if offer.sku == "h100-80g-x8" else "bare_metal"
            nodes = 2 if kind == "cluster" else 1
            req = OrderRequest(kind=kind, nodes=nodes, sku=offer.sku, region=offer.region,
                               ssh_keys=[key])
            ids.append(orders.place_order(fleet, tenant.principal, req)[0].id)
        wait_for(lambda: all(instance(fleet, i).status == "ready" for i in ids), 60,
                 "all instances ready")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(10)
    with fleet.db.read() as s:
        for node in s.scalars(select(Node).where(Node.instance_id.is_not(None))):
            stages = [e.to_value for e in s.scalars(
                select(Event).where(Event.resource == "node", Event.resource_id == node.id,
                                    Event.kind == "stage").order_by(Event.id))]
            # each stage entered exactly once, in order, then done: no step applied twice
            assert stages == [*(st.value for st in DEPLOY_ORDER), "idle"], (node.name, stages)
    assert len(ids) == len(fleet.catalog.offers)


def test_a_swap_survives_a_worker_killed_in_the_middle(
    platform: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    """The drill: a rented H100 → XID 79 on GPU 3 → a P1 ticket → the operator swaps → the
    worker is SIGKILLed while the spare boots → a new worker finishes: the spare delivered,
    the old node erased and in repair → repaired → back in the pool; the ticket's timeline
    whole."""
    from gpulease.db.tables import HardwareAlert
    from gpulease.demo import seed_demo_fleet
    from gpulease.demo_agents import DemoAgents
    from gpulease.domain.errors import Conflict
    from gpulease.services.fleet import node_changes
    from gpulease.services.instances import views as instances
    from gpulease.services.money import sla, wallet
    from gpulease.services.support import repairs, replacement, tickets
    from gpulease.worker.runner import Worker

    seed_demo_fleet(platform, 3)
    op = operator.principal
    req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key])
    iid = orders.place_order(platform, tenant.principal, req)[0].id
    Worker(platform).run_until_idle()  # delivered at once; the drill starts from here
    assert instance(platform, iid).status == "ready"
    worker = start_worker(platform)
    try:
        old = instances.show_instance(platform, tenant.principal, iid).nodes[0].name
        node_changes.inject_faults(platform, op, old, ["xid79:3"])
        DemoAgents(platform).tick()
        (ticket,) = tickets.list_tickets(platform, tenant.principal).items
        assert ticket.severity == "P1" and ticket.gpu == 3
        with platform.db.write() as s:  # the fault was first seen two hours ago
            for alert in s.scalars(select(HardwareAlert)):
                alert.opened_at -= timedelta(hours=2)
        replacement.swap(platform, op, ticket.id, Swap("drill"))

        def spare_booting() -> bool:
            with platform.db.read() as s:
                return s.scalar(select(Node.id).where(
                    Node.instance_id == iid, Node.status == NodeStatus.DEPLOYING.value,
                    Node.step_in_progress == "power_on")) is not None

        wait_for(spare_booting, 30, "the spare inside power_on")
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        worker = start_worker(platform)
        wait_for(lambda: instance(platform, iid).stage == "ready", LOCK_TTL + STAGE_TIMEOUT
                 + 20, "the spare delivered after the kill")
        wait_for(lambda: old in _nodes_in(platform, NodeStatus.REPAIR), 30,
                 "the old node erased and in repair")
        done = tickets.show_ticket(platform, tenant.principal, ticket.id)
        assert done.status == "mitigated"
        kinds = [e.kind for e in done.timeline]
        assert kinds[0] == "opened" and "evidence" in kinds and "status" in kinds
        # credits by the rule, once: two hours out beyond the free hour, one claim
        (claim_ref,) = [e.ref for e in done.timeline if e.ref and e.ref.startswith("claim:")]
        claim_id = (claim_ref or "").split(":", 1)[1]
        sla.decide(platform, op, claim_id, confirm=True)
        with pytest.raises(Conflict):
            sla.decide(platform, op, claim_id, confirm=True)
        credits = [e for e in wallet.ledger(platform, tenant.principal).items
                   if e.kind == "credit"]
        assert len(credits) == 1 and credits[0].amount > 0
        serving = [n for n in instances.show_instance(platform, tenant.principal, iid).nodes
                   if n.status == "active"]
        assert len(serving) == 1 and serving[0].name != old
        repairs.finish(platform, op, old, "GPU 3: 1652200012 -> 1652200087")
        wait_for(lambda: old in _nodes_in(platform, NodeStatus.AVAILABLE), 30,
                 "the repaired node back in the pool")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
