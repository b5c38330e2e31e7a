"""The idle sweep tells a tenant once a day that a delivered instance's GPUs sat idle most
of the last day, by e-mail and by webhook event `instance.idle`; a busy instance, or one
whose day was mostly unseen, is not said idle. SQLite and PostgreSQL."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.platform.notify import _subject
from gpulease.services.telemetry.pushes import ingest
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import delivered_with_agent, instance_notices, window
from gpulease.worker.jobs.telemetry.idle import run

HOUR = 3600.0


def push(p: Platform, clock: MovableClock, credential: str, hours: int, util: float) -> None:
    shape = window()
    for h in range(hours):
        clock.move(hours=1)
        ingest(p, credential, [{**g, "start": h * HOUR, "end": (h + 1) * HOUR,
                                "util_avg_pct": util} for g in shape])


def test_a_day_idle_is_told_once_a_day(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    iid, _, credential = delivered_with_agent(fleet, tenant, key)
    push(fleet, clock, credential, 12, 0.0)
    assert run(fleet, "w") == 0  # half a day seen: not enough to say it
    push(fleet, clock, credential, 12, 0.0)
    assert run(fleet, "w") == 1
    assert run(fleet, "w") == 0  # told today already
    assert instance_notices(fleet, iid).count("instance_idle") == 1
    assert _subject("instance_idle", iid)[1] == "instance.idle"  # the webhook's event
    push(fleet, clock, credential, 24, 0.0)
    assert run(fleet, "w") == 1  # a day later and still idle: told again
    push(fleet, clock, credential, 24, 60.0)
    clock.move(days=1)
    assert run(fleet, "w") == 0  # busy, or unseen: nothing said
    assert instance_notices(fleet, iid).count("instance_idle") == 2
