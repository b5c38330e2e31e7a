"""A periodic job: its name, its interval, what it does. Each lives in a module of its own
under worker/jobs/<family>/ (the family whose tables it writes), declares `JOB`, and is
listed once in worker/schedule.py, which runs every job on its own thread at its interval,
never inside a pipeline's thread: a slow job delays only itself.

A job that asks hardware or another service on the way (a BMC, an agent, an object store)
does so through `fan_out`: at most GPULEASE_JOB_IO_CONCURRENCY calls at once, and no call
started after GPULEASE_JOB_BUDGET_S; what was not reached stays due for the next run. Each
call is bounded by its driver's own timeout. Every job is safe to run in several workers at
once: it claims or locks what it changes. A job that calls servers' BMCs reads only those
of the regions its worker serves (`at_site`: services/platform/sites.py)."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from gpulease.platform import Platform
from gpulease.services.platform.sites import Scope
from gpulease.settings import Settings

T = TypeVar("T")
R = TypeVar("R")


def every_sweep(settings: Settings) -> float:
    """The default interval: GPULEASE_SWEEP_INTERVAL_S."""
    return settings.sweep_interval_s


@dataclass(frozen=True)
class Job:
    name: str
    run: Callable[[Platform, str], object]  # (platform, this worker's name)
    does: str  # what it does, in the docs' table
    every_s: Callable[[Settings], float] = every_sweep
    # a job that reaches a site's servers: run with the worker's scope instead of `run`
    at_site: Callable[[Platform, Scope], object] | None = None


def fan_out(items: Sequence[T], call: Callable[[T], R], *, concurrency: int,
            budget_s: float) -> list[R]:
    """`call` on each item, at most `concurrency` at once; calls not started within
    `budget_s` are not made (their items stay due). Calls under way finish (each bounded by
    its driver's timeout). Returns the results of the calls made, in the items' order; a
    call that raised is left out (the call logs its own trouble)."""
    if not items:
        return []
    deadline = time.monotonic() + budget_s
    results: dict[int, R] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(items))),
                            thread_name_prefix="gpulease-job-io") as pool:
        started: dict[Future[R], int] = {}
        queue = list(enumerate(items))
        while queue or started:
            while queue and len(started) < concurrency and time.monotonic() < deadline:
                index, item = queue.pop(0)
                # each call in a copy of the caller's context: it acts for the same worker
                started[pool.submit(contextvars.copy_context().run, call, item)] = index
            if time.monotonic() >= deadline:
                queue.clear()  # left for the next run
            if not started:
                break
            done, _ = wait(started, timeout=max(0.0, deadline - time.monotonic()) or None,
                           return_when=FIRST_COMPLETED)
            for future in done:
                index = started.pop(future)
                if future.exception() is None:
                    results[index] = future.result()
    return [results[i] for i in sorted(results)]
