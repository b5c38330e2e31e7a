"""Thermal throttling is judged over a GPU's recent windows joined, not one window's total:
the seeds' saw-tooth (30 s throttled of every 2 minutes) opens its P2 ticket within two
cycles whether the agent sends 10 s windows (never 30 s in one) or 60 s ones whose edges
split the throttled half-minute."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.db.ops_tables import Ticket
from gpulease.platform import Platform
from gpulease.services.telemetry.pushes import ingest
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import delivered_with_agent

CYCLE_S = 120


@pytest.mark.parametrize("window_s", [10, 60])
def test_a_saw_tooth_opens_a_p2_ticket_within_two_cycles_whatever_the_window(
        fleet: Platform, tenant: TenantCtx, key: str, clock: MovableClock,
        window_s: int) -> None:
    iid, node, credential = delivered_with_agent(fleet, tenant, key)
    # 45 s into a tooth: a 60 s window's edge falls in the middle of the throttled 30 s
    gpus = SimulatedGpus(8, faults=parse_faults(["thermal:2"]), clock=VirtualClock(45.0))
    gpus.load = 0.7
    raised_after = None
    for push in range(1, 2 * CYCLE_S // window_s + 1):
        sampler = Sampler(gpus, window_s=window_s + 1)
        for _ in range(window_s):
            sampler.sweep()
            gpus.clock.advance(1.0)  # type: ignore[attr-defined]
        window = sampler.summaries()
        assert max(g.thermal_throttle_s for g in window) < 30  # no window alone shows it
        clock.move(seconds=window_s)
        alerts = ingest(fleet, credential, [g.as_dict() for g in window])
        if any(a["kind"] == "thermal_throttling" and a["gpu"] == 2 for a in alerts):
            raised_after = push * window_s
            break
    assert raised_after is not None and raised_after <= 2 * CYCLE_S
    with fleet.db.read() as s:
        (ticket,) = s.scalars(select(Ticket).where(Ticket.node_id == node.id))
        assert (ticket.kind, ticket.severity, ticket.gpu_index) == (
            "thermal_throttling", "P2", 2)
