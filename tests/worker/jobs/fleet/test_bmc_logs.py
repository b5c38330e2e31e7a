"""The BMC log sweep asks slow BMCs a few at a time and for a bounded time: at most
GPULEASE_JOB_IO_CONCURRENCY reads at once, none started after GPULEASE_JOB_BUDGET_S (those
BMCs stay due and are read at the next run); a critical entry becomes a hardware alert."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import func, select, update

from gpulease.db.tables import HardwareAlert, Node
from gpulease.platform import Platform
from gpulease.ports.bmc import Bmc, BmcLog
from gpulease.testing.factories import sim
from gpulease.worker.jobs.fleet import bmc_logs

WATCHED = 6


class CountingBmc:
    """A BMC whose log read takes `read_s`, counting the reads under way at once."""

    inside = 0
    most = 0
    reads = 0
    read_s = 0.2
    lock = threading.Lock()

    def __init__(self, bmc: Bmc) -> None:
        self._bmc = bmc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bmc, name)

    def event_log(self, seen: object = None) -> BmcLog:
        cls = CountingBmc
        with cls.lock:
            cls.inside += 1
            cls.reads += 1
            cls.most = max(cls.most, cls.inside)
        time.sleep(cls.read_s)
        with cls.lock:
            cls.inside -= 1
        return self._bmc.event_log()


def _watch(p: Platform) -> list[str]:
    """WATCHED simulated nodes made rented (as delivered servers are), never read yet."""
    with p.db.write() as s:
        names = list(s.scalars(select(Node.name).where(Node.bmc_driver == "simulated")
                               .order_by(Node.name).limit(WATCHED)))
        s.execute(update(Node).where(Node.name.in_(names))
                  .values(status="active", bmc_checked_at=None))
    real = p.drivers.bmc["simulated"]
    p.drivers.bmc["simulated"] = lambda endpoint: CountingBmc(real(endpoint))
    p.settings.bmc_events = False
    CountingBmc.inside = CountingBmc.most = CountingBmc.reads = 0
    return names


def _unread(p: Platform, names: list[str]) -> int:
    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(Node).where(
            Node.name.in_(names), Node.bmc_checked_at.is_(None))) or 0


def test_bmcs_are_read_a_few_at_a_time_and_alerts_opened(fleet: Platform) -> None:
    names = _watch(fleet)
    fleet.settings.job_io_concurrency = 2
    assert bmc_logs.JOB.run(fleet, "test") == 0  # each log's past read as history
    assert CountingBmc.reads == WATCHED and CountingBmc.most == 2
    assert _unread(fleet, names) == 0
    sim(fleet).add_bmc_log(names[0], "Critical", "GPU 3 has fallen off the bus",
                           "2026-12-01T09:00:00+00:00")
    with fleet.db.write() as s:  # its interval passed
        s.execute(update(Node).where(Node.name == names[0]).values(bmc_checked_at=None))
    assert bmc_logs.JOB.run(fleet, "test") == 1
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(HardwareAlert).where(
            HardwareAlert.source == "bmc")) == 1


def test_no_read_starts_after_the_budget(fleet: Platform) -> None:
    names = _watch(fleet)
    fleet.settings.job_io_concurrency = 1
    fleet.settings.job_budget_s = 0.1
    CountingBmc.read_s = 0.3
    try:
        bmc_logs.JOB.run(fleet, "test")
        assert CountingBmc.reads == 1 and _unread(fleet, names) == WATCHED - 1
        bmc_logs.JOB.run(fleet, "test")  # the next run goes on where this one stopped
        assert CountingBmc.reads == 2 and _unread(fleet, names) == WATCHED - 2
    finally:
        CountingBmc.read_s = 0.2
