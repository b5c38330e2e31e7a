"""`fan_out`, how a job asks hardware: at most `concurrency` calls at once, none started
after the budget (what was not reached is left for the next run), a call that raises left
out of the results while the others go on."""

from __future__ import annotations

import threading
import time

from gpulease.worker.jobs.job import fan_out


def test_calls_are_bounded_in_concurrency_and_keep_their_order() -> None:
    inside, most = 0, 0
    lock = threading.Lock()

    def call(n: int) -> int:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        with lock:
            inside -= 1
        return n * n

    assert fan_out(list(range(8)), call, concurrency=3, budget_s=30) == [
        n * n for n in range(8)]
    assert most == 3


def test_no_call_starts_after_the_budget() -> None:
    started: list[int] = []

    def call(n: int) -> int:
        started.append(n)
        time.sleep(0.3)
        return n

    done = fan_out(list(range(10)), call, concurrency=2, budget_s=0.1)
    assert done == [0, 1] and sorted(started) == [0, 1]  # the rest wait for the next run


def test_a_call_that_raises_is_left_out() -> None:
    def call(n: int) -> int:
        if n == 2:
            raise RuntimeError("this BMC is away")
        return n

    assert fan_out([1, 2, 3], call, concurrency=2, budget_s=10) == [1, 3]
    assert fan_out([], call, concurrency=2, budget_s=10) == []


def test_each_call_acts_for_the_worker_that_fanned_it_out() -> None:
    """A BMC call made on the job's I/O threads names the worker that runs the job."""
    from gpulease.drivers.on_behalf import acting_for, user_agent, worker

    with acting_for("w-ningxia"):
        said = fan_out(list(range(6)), lambda _: (worker(), user_agent()), concurrency=3,
                       budget_s=10)
    assert {who for who, _ in said} == {"w-ningxia"}
    assert all(agent.endswith("(worker w-ningxia)") for _, agent in said)
    assert worker() is None and "(worker" not in user_agent()  # outside: nobody's
