"""A telemetry push takes its locks in the platform's one order (the node's instance, then
the node, then the agent's own row): a swap or a release that holds the instance and the
node and then ends the agent's credential never deadlocks with a push of that node."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, text

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.db.tables import Instance, Node, NodeAgent
from gpulease.platform import Platform
from gpulease.services.telemetry.pushes import ingest
from gpulease.testing.callers import TenantCtx
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
