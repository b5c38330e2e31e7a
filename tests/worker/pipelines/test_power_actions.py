"""The power-actions pipeline: a BMC's transient error is sent again later, and a server
already reached is not reset twice; a refusal fails the action with the BMC's words; a
worker lost while sending leaves the action failed, not sent again; a worker that lost its
claim mid-step sends nothing (the fence). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from gpulease.db.claims import Claim, take
from gpulease.db.ops_tables import PowerAction
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.services.instances import power
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, node_name_of, sim
from gpulease.worker.pipelines import power_actions
from gpulease.worker.pipelines.base import claim_due, drive
from gpulease.worker.runner import Worker


def _sent(fleet: Platform, name: str, op: str) -> int:
    return int(sim(fleet).snapshot(name).get("requests", {}).get(op, 0))


def test_a_transient_error_is_sent_again_and_a_refusal_fails(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    name = node_name_of(fleet, tenant, iid)
    sim(fleet).inject_fault(name, "graceful_restart", "transient")
    power.request_power(fleet, tenant.principal, iid, "reboot")
    assert drive(fleet, power_actions.PIPELINE) == 1
    (waiting,) = power.power_actions(fleet, tenant.principal, iid).items
    assert waiting.status == "queued" and "503" in (waiting.status_reason or "")
    assert drive(fleet, power_actions.PIPELINE) == 0  # not before its backoff
    clock.move(minutes=5)
    assert drive(fleet, power_actions.PIPELINE) == 1
    assert power.power_actions(fleet, tenant.principal, iid).items[0].status == "done"
    assert _sent(fleet, name, "graceful_restart") == 2  # the failed one, then the one taken

    sim(fleet).inject_fault(name, "force_restart", "permanent")
    power.request_power(fleet, tenant.principal, iid, "power_cycle")
    drive(fleet, power_actions.PIPELINE)
    failed = power.power_actions(fleet, tenant.principal, iid).items[0]
    assert failed.status == "failed" and "401 Unauthorized" in (failed.status_reason or "")


def _claimed_by_a(fleet: Platform, clock: MovableClock) -> Claim:
    """The queued action claimed by worker A."""
    (held,) = claim_due(fleet, PowerAction, "a", limit=1,
                        extra=power_actions.PIPELINE.due(clock.now()), due=False)
    return held


def test_a_worker_lost_while_sending_is_not_followed_by_a_second_reset(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    name = node_name_of(fleet, tenant, iid)
    asked = power.request_power(fleet, tenant.principal, iid, "power_cycle")
    held = _claimed_by_a(fleet, clock)
    with fleet.db.write() as s:  # worker A began sending, and froze past its lock
        row = s.get(PowerAction, asked.id)
        assert row is not None
        row.step_in_progress = "power"
    clock.move(seconds=fleet.settings.lock_ttl_s + 1)
    assert drive(fleet, power_actions.PIPELINE) == 1  # B takes it over: failed, not resent
    failed = power.power_actions(fleet, tenant.principal, iid).items[0]
    assert failed.status == "failed" and "worker sending it was lost" in (
        failed.status_reason or "")
    assert _sent(fleet, name, "force_restart") == 0
    power_actions.step_power(fleet, held)  # A wakes: its claim is gone, nothing is sent
    assert _sent(fleet, name, "force_restart") == 0


def test_a_worker_that_lost_its_claim_mid_step_sends_nothing(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim is taken from A after its step read the action and before it calls the
    BMC (A froze there): the fence stops the call, and the action stays queued."""
    iid = deliver(fleet, tenant, worker, key)
    name = node_name_of(fleet, tenant, iid)
    asked = power.request_power(fleet, tenant.principal, iid, "reboot")
    held = _claimed_by_a(fleet, clock)
    bmc_for = fleet.drivers.bmc_for

    def frozen_then_taken(driver: str, endpoint: BmcEndpoint) -> object:
        with fleet.db.write() as s:
            row = s.get(PowerAction, asked.id)
            assert row is not None
            take(row)
        return bmc_for(driver, endpoint)

    monkeypatch.setattr(fleet.drivers, "bmc_for", frozen_then_taken)
    power_actions.step_power(fleet, held)
    assert _sent(fleet, name, "graceful_restart") == 0
    assert power.power_actions(fleet, tenant.principal, iid).items[0].status == "queued"
