"""The safe-off job: a node whose stage failed is left safe at its BMC (media out, boot
override cleared, power off), politely after a BMC that ignores power requests."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from gpulease.db.tables import Event, Node
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name, node_name_of, place, sim
from gpulease.worker.runner import Worker


def test_a_bmc_that_ignores_power_requests_is_asked_politely_then_left_safe(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    """Its power never changes: three requests a minute apart, polls at most one every
    2 s after the first 10 s, then maintenance saying why; the server is then left safe
    (media out, boot override cleared, power off requested)."""

    from gpulease.testing.clock import MovableClock
    from gpulease.worker.jobs.fleet.safe_off import safe_off

    clock = MovableClock(datetime(2026, 12, 1, 9, tzinfo=UTC))
    fleet.clock = clock
    # the stage's own deadline out of the way: the worker's sweep runs on real time, and a
    # slow machine would let it fail the stage before the BMC's verdict
    fleet.settings.stage_timeout_s = 10_000
    # and the periodic sweeps (safe-off among them, on real time) left to the test: on a
    # busy machine one could run between the failure and the look at what it left
    worker.sweep_every_s = float("inf")
    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "power_on", "ignored", times=100)
    for _ in range(2000):  # bounded: 1,000 simulated seconds
        clock.move(seconds=0.5)
        worker.step()
        node = node_by_name(fleet, name)
        if node.status == "maintenance":
            break
    assert node.status == "maintenance"
    assert "ignores power requests: 3 × power on" in (node.status_reason or "")
    state = sim(fleet).snapshot(name)
    assert state["ignored_requests"] == 3
    # ~180 s in the stage: 20 reads in the first 10 s, then one per 2-2.5 s
    assert state["power_reads"] <= 20 + (180 - 10) / 2 + 10, state["power_reads"]
    assert state["media"] is not None  # what the failed deploy left behind…
    with fleet.db.read() as s:
        assert s.get(Node, node.id).safe_off_due  # type: ignore[union-attr]
    assert safe_off(fleet) >= 1
    state = sim(fleet).snapshot(name)
    assert state["media"] is None and state["usb"] is None  # …is taken away
    assert state["boot_override"] is None and state["power_target"] == "off"
    with fleet.db.read() as s:
        assert not s.get(Node, node.id).safe_off_due  # type: ignore[union-attr]
        (said,) = s.scalars(select(Event.message).where(
            Event.resource_id == node.id, Event.kind == "safe_off")).all()
    assert said is not None and "media ejected, boot override cleared, power off" in said
