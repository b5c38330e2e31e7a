"""Which worker a device call is made for, and under which claim. A worker names itself
around each step it drives and each periodic job it runs (`acting_for`), and the drivers say
it to the device: a Redfish request's User-Agent reads `gpulease/<version> (worker <owner>)`,
so a BMC's own log tells which worker, on which host and process, called it (with sites,
that it was one of the BMC's own site).

A call that changes hardware or a tenant's data is made under the worker's claim on the row
(`fenced_by`, worker/pipelines/fence.py). Right before each request of such a call leaves
the process, the drivers ask `before_change`: the claim is confirmed fresh again (a process
frozen since the fence's check, for longer than the check vouches for, is stopped here,
before sending), and the request names the claim in `X-Gpulease-Claim` (its table, row and
a digest of its lock token), so the device's log, or a witness in front of it, can tell a
call made under a claim that was no longer held (bench/crash.py counts them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from gpulease import __version__

_WORKER: ContextVar[str | None] = ContextVar("gpulease_worker", default=None)
CLAIM_HEADER = "X-Gpulease-Claim"
READS = frozenset({"GET", "HEAD", "OPTIONS"})


class Fenced(RuntimeError):
    """The claim is gone: the call was not made."""


class ClaimGuard(Protocol):
    def fresh(self, call: str) -> str:
        """The claim's label once it is confirmed still held, fresh enough for a request
        to leave now; raises Fenced when it is not."""
        ...


_GUARD: ContextVar[ClaimGuard | None] = ContextVar("gpulease_claim_guard", default=None)


@contextmanager
def fenced_by(guard: ClaimGuard) -> Iterator[None]:
    """Requests that change a device, made inside, go out only under `guard`'s claim."""
    token = _GUARD.set(guard)
    try:
        yield
    finally:
        _GUARD.reset(token)


def before_change(call: str) -> dict[str, str]:
    """Right before a request that changes a device leaves: the claim in hand confirmed
    fresh (Fenced when it is gone) and named for the device's log; {} outside a fenced
    call (an operator's or a tenant's own request)."""
    guard = _GUARD.get()
    return {} if guard is None else {CLAIM_HEADER: guard.fresh(call)}


def guard_session(session: Any) -> None:
    """Every request of this requests.Session (sushy's, Docker's) that is not a read asks
    `before_change` as it is sent."""
    send = session.send

    def sending(request: Any, **kwargs: Any) -> Any:
        if request.method not in READS:
            request.headers.update(before_change(f"{request.method} {request.path_url}"))
        return send(request, **kwargs)

    session.send = sending


@contextmanager
def acting_for(owner: str) -> Iterator[None]:
    """Device calls made inside are made for worker `owner`."""
    token = _WORKER.set(owner)
    try:
        yield
    finally:
        _WORKER.reset(token)


def worker() -> str | None:
    """The worker the calls in hand are made for (None: an API request, a CLI)."""
    return _WORKER.get()


def user_agent() -> str:
    owner = worker()
    return f"gpulease/{__version__}" + (f" (worker {owner})" if owner else "")
