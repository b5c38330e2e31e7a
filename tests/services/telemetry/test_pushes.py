"""A telemetry push takes its locks in the platform's one order (the node's instance, then
the node, then the agent's own row): a swap or a release that holds the instance and the
node and then ends the agent's credential never deadlocks with a push of that node. A
node's agent stores at most its daily byte budget: past it, a push is refused (429 until
the next UTC day, nothing stored) and counted for the operator."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, text

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.db.tables import Instance, Node, NodeAgent, TelemetrySummary
from gpulease.domain.errors import TooManyRequests
from gpulease.platform import Platform
from gpulease.services.platform import control_metrics
from gpulease.services.telemetry.pushes import ingest
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import delivered_with_agent


# SQLite has one writer at a time: no two transactions hold rows at once there
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_push_waits_for_a_swap_that_holds_its_instance_and_node(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    iid, node, credential = delivered_with_agent(fleet, tenant, key)
    gpus = SimulatedGpus(8, clock=VirtualClock(0.0))
    sampler = Sampler(gpus, window_s=11)
    for _ in range(10):
        sampler.sweep()
        gpus.clock.advance(1.0)  # type: ignore[attr-defined]
    window = [g.as_dict() for g in sampler.summaries()]
    failed: list[BaseException] = []

    def push() -> None:
        try:
            ingest(fleet, credential, window)
        except BaseException as exc:  # noqa: BLE001 - the finding, for the assertion
            failed.append(exc)

    with fleet.db.write() as swap:  # as a swap's transaction: the instance, then the node
        swap.execute(text("SET LOCAL lock_timeout = '5s'"))
        swap.execute(select(Instance.id).where(Instance.id == iid).with_for_update())
        swap.execute(select(Node.id).where(Node.id == node.id).with_for_update())
        pusher = threading.Thread(target=push)
        pusher.start()
        pusher.join(0.5)
        assert pusher.is_alive()  # the push waits for the swap: it has taken nothing yet
        # …which then ends the agent's credential: its row is free to take
        swap.execute(select(NodeAgent.node_id).where(NodeAgent.node_id == node.id)
                     .with_for_update())
    pusher.join(10)
    assert not pusher.is_alive() and not failed, failed


def _window() -> list[dict[str, object]]:
    gpus = SimulatedGpus(8, clock=VirtualClock(0.0))
    sampler = Sampler(gpus, window_s=11)
    for _ in range(10):
        sampler.sweep()
        gpus.clock.advance(1.0)  # type: ignore[attr-defined]
    return [g.as_dict() for g in sampler.summaries()]


def _stored(p: Platform, node_id: str) -> int:
    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(TelemetrySummary)
                        .where(TelemetrySummary.node_id == node_id)) or 0


def test_an_agent_past_its_daily_budget_is_refused_until_the_next_day_and_counted(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    _, node, credential = delivered_with_agent(fleet, tenant, key)
    fleet.clock = clock = MovableClock(datetime(2026, 12, 5, 23, 0, tzinfo=UTC))
    window = _window()
    size = sum(len(json.dumps(g)) for g in window)
    fleet.settings.agent_push_bytes_per_day = int(size * 2.5)  # two pushes fit, not three
    ingest(fleet, credential, window)
    ingest(fleet, credential, window)
    assert _stored(fleet, node.id) == 16
    with pytest.raises(TooManyRequests) as refused:
        ingest(fleet, credential, window)
    assert refused.value.retry_after_s == 3600  # until 00:00 UTC
    assert node.name in str(refused.value) and "GPULEASE_AGENT_PUSH_BYTES_PER_DAY" in str(
        refused.value)
    assert _stored(fleet, node.id) == 16  # nothing of it stored
    metrics = {m.name: m for m in text_string_to_metric_families(
        control_metrics.render(fleet).decode())}
    assert [(s.labels["node"], s.value) for s in
            metrics["gpulease_agent_pushes_refused"].samples
            if s.name.endswith("_total")] == [(node.name, 1.0)]

    clock.move(hours=1)  # the next day (UTC): a fresh budget
    ingest(fleet, credential, window)
    assert _stored(fleet, node.id) == 24
