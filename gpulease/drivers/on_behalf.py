"""Which worker a device call is made for. A worker names itself around each step it drives
and each periodic job it runs (`acting_for`), and the drivers say it to the device: a
Redfish request's User-Agent reads `gpulease/<version> (worker <owner>)`, so a BMC's own
log tells which worker, on which host and process, called it (with sites, that it was one
of the BMC's own site)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gpulease import __version__

_WORKER: ContextVar[str | None] = ContextVar("gpulease_worker", default=None)


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
