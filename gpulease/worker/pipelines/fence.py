"""The fence: a worker makes a call that changes hardware or a tenant's data (power, the
boot override, virtual media, the agent's configure, verify, erase and transfers, a
container's start, stop and save on a shared server's engine) only after
confirming it still holds its claim on the row, with at least half its lock still to run
(db/claims.py `still_held`). A worker frozen past its lock (SIGSTOP, a paused VM, a network
stall) has been taken over by then: it abandons the step without calling, and its late
result finds no row to write (`guarded`). Reads (the power state, the inventory) go
through unchecked.

The check vouches for a quarter of the lock's time, on the monotonic clock (which runs on
while a process is stopped). Each request of the call that changes a device asks again as
it leaves (drivers/on_behalf.py `before_change`): within that quarter it goes; after it, the
claim is confirmed in the database again first. So a worker frozen between the check and
its request, for longer than the claim had left, does not send when it wakes: its claim
still had at least a quarter of its lock to run when the request left, and no other
worker can have taken it over. A command for the real agent is a row the same check
precedes."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from gpulease.db.claims import Claim, still_held
from gpulease.drivers.on_behalf import Fenced, fenced_by
from gpulease.platform import Platform
from gpulease.ports.agent import Agent
from gpulease.ports.bmc import Bmc
from gpulease.ports.runtime import ContainerRuntime

log = logging.getLogger("gpulease.worker")

BMC_CALLS = frozenset({"power_on", "power_off", "force_restart", "graceful_restart",
                       "set_one_time_boot",
                       "clear_boot_override", "insert_media", "eject_media"})
AGENT_CALLS = frozenset({"configure", "verify", "erase", "transfer"})
RUNTIME_CALLS = frozenset({"start", "stop", "restart", "save"})


__all__ = ["Fence", "Fenced", "fenced_agent", "fenced_bmc", "fenced_runtime"]


@dataclass
class Fence:
    p: Platform
    claim: Claim
    # monotonic time until which the last check vouches for the claim
    fresh_until: float = field(default=float("-inf"), compare=False)

    def check(self, call: str) -> None:
        margin = timedelta(seconds=self.p.settings.lock_ttl_s / 2)
        if not still_held(self.p.db, self.claim, self.p.clock.now(), margin):
            self.fresh_until = float("-inf")
            log.warning("fenced: %s of %s not sent (this worker's claim is gone or about "
                        "to expire)", call, self.claim.id,
                        extra={"fields": {"decision": "fenced", "call": call,
                                          "row": self.claim.id}})
            raise Fenced(f"{call} not sent: this worker no longer holds {self.claim.id}")
        self.fresh_until = time.monotonic() + margin.total_seconds() / 2

    def fresh(self, call: str) -> str:
        """Asked as each request that changes a device leaves (drivers/on_behalf.py)."""
        if time.monotonic() >= self.fresh_until:
            self.check(call)
        return self.label

    @property
    def label(self) -> str:
        """The claim for a device's log: table, row and a digest of the lock token (the
        token itself stays in the database)."""
        table: Any = self.claim.table
        return claim_label(str(table.__tablename__), self.claim.id, self.claim.token)


def claim_label(table: str, row_id: str, token: str) -> str:
    return f"{table}/{row_id}/{hashlib.sha256(token.encode()).hexdigest()[:16]}"


class _Fenced:
    """`target` with `calls` checked against the fence first; every other attribute as is."""

    def __init__(self, target: object, fence: Fence, calls: frozenset[str]) -> None:
        self._target, self._fence, self._calls = target, fence, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._calls or not callable(attr):
            return attr
        call = cast(Callable[..., Any], attr)

        def fenced(*args: Any, **kwargs: Any) -> Any:
            self._fence.check(name)
            with fenced_by(self._fence):
                return call(*args, **kwargs)

        return fenced


def fenced_bmc(bmc: Bmc, fence: Fence | None) -> Bmc:
    return bmc if fence is None else cast(Bmc, _Fenced(bmc, fence, BMC_CALLS))


def fenced_agent(agent: Agent, fence: Fence | None) -> Agent:
    return agent if fence is None else cast(Agent, _Fenced(agent, fence, AGENT_CALLS))


def fenced_runtime(runtime: ContainerRuntime, fence: Fence | None) -> ContainerRuntime:
    return runtime if fence is None else cast(ContainerRuntime,
                                              _Fenced(runtime, fence, RUNTIME_CALLS))
