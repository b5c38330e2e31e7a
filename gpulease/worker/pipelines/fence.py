"""The fence: a worker makes a call that changes hardware or a tenant's data (power, the
boot override, virtual media, the agent's configure, verify, erase and transfers, a
container's start, stop and save on a shared server's engine) only after
confirming it still holds its claim on the row, with at least half its lock still to run
(db/claims.py `still_held`). A worker frozen past its lock (SIGSTOP, a paused VM, a network
stall) has been taken over by then: it abandons the step without calling, and its late
result finds no row to write (`guarded`). Reads (the power state, the inventory) go
through unchecked."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from gpulease.db.claims import Claim, still_held
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


class Fenced(RuntimeError):
    """The claim is gone: the call was not made."""


@dataclass(frozen=True)
class Fence:
    p: Platform
    claim: Claim

    def check(self, call: str) -> None:
        margin = timedelta(seconds=self.p.settings.lock_ttl_s / 2)
        if not still_held(self.p.db, self.claim, self.p.clock.now(), margin):
            log.warning("fenced: %s of %s not sent (this worker's claim is gone or about "
                        "to expire)", call, self.claim.id,
                        extra={"fields": {"decision": "fenced", "call": call,
                                          "row": self.claim.id}})
            raise Fenced(f"{call} not sent: this worker no longer holds {self.claim.id}")


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
            return call(*args, **kwargs)

        return fenced


def fenced_bmc(bmc: Bmc, fence: Fence | None) -> Bmc:
    return bmc if fence is None else cast(Bmc, _Fenced(bmc, fence, BMC_CALLS))


def fenced_agent(agent: Agent, fence: Fence | None) -> Agent:
    return agent if fence is None else cast(Agent, _Fenced(agent, fence, AGENT_CALLS))


def fenced_runtime(runtime: ContainerRuntime, fence: Fence | None) -> ContainerRuntime:
    return runtime if fence is None else cast(ContainerRuntime,
                                              _Fenced(runtime, fence, RUNTIME_CALLS))
