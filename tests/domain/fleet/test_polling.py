"""How often a BMC is asked and told (domain/fleet/polling.py): fast for the first seconds of a
stage, then at most once every 2 s with jitter; a power request at once, then one more per
minute of silence, three at most; three ignored requests fail the stage."""

from __future__ import annotations

from gpulease.domain.fleet.polling import (
    FAST_FOR_S,
    POWER_PATIENCE_S,
    SLOW_EVERY_S,
    next_poll_in,
    power_ignored,
    power_request_due,
)


def test_polls_slow_down_after_the_first_seconds_with_jitter() -> None:
    assert next_poll_in(0, 0.5) == 0.5 and next_poll_in(FAST_FOR_S - 0.1, 0.5) == 0.5
    waits = [next_poll_in(FAST_FOR_S + 1, 0.5, rng=lambda r=r: r) for r in (0.0, 0.5, 0.999)]
    assert waits[0] == SLOW_EVERY_S and all(SLOW_EVERY_S <= w < SLOW_EVERY_S * 1.25
                                            for w in waits)
    assert len(set(waits)) == 3  # jittered: deploying nodes do not poll in step
    assert next_poll_in(FAST_FOR_S + 1, 5.0, rng=lambda: 0.0) == 5.0  # a slower engine pace


def test_three_power_requests_a_stage_at_most_then_the_bmc_is_ignoring_them() -> None:
    assert power_request_due(0, 0)
    assert not power_request_due(1, POWER_PATIENCE_S - 1)
    assert power_request_due(1, POWER_PATIENCE_S) and power_request_due(2, 2 * POWER_PATIENCE_S)
    assert not power_request_due(3, 10 * POWER_PATIENCE_S)
    assert not power_ignored(3, 3 * POWER_PATIENCE_S - 1)
    assert power_ignored(3, 3 * POWER_PATIENCE_S)
    # at most one GET every 2 s after the first 10 s: a 15-minute stage polls ~440 times,
    # not 1,800 (the 0.5 s pace), and never more than 4 power requests could be sent
    polls, t = 0, 0.0
    while t < 900:
        t += next_poll_in(t, 0.5, rng=lambda: 0.0)
        polls += 1
    assert polls <= 10 / 0.5 + (900 - 10) / SLOW_EVERY_S + 1
