"""How often a BMC is asked, and how often it is told. A stage polls fast at first (most
power changes land within seconds), then at most once every 2 s with jitter, so a hundred
deploying nodes do not hammer their BMCs in step. A power request is sent once, then again
only after a minute of silence, at most three times a stage (some BMCs restart the
transition on every request); a BMC that let three requests and three minutes pass without
changing the power is ignoring them, and the stage fails saying so. Pure."""

from __future__ import annotations

import random
from collections.abc import Callable

FAST_FOR_S = 10.0  # poll at the engine's pace this long into a stage
SLOW_EVERY_S = 2.0  # then at most once every this many seconds…
JITTER = 0.25  # …plus up to this share of it, at random
POWER_REQUESTS = 3  # power requests a stage may send
POWER_PATIENCE_S = 60.0  # silence after a request before the next


def next_poll_in(elapsed_s: float, base_s: float,
                 rng: Callable[[], float] = random.random) -> float:
    """Seconds until the next poll of a stage `elapsed_s` old (engine pace `base_s`)."""
    if elapsed_s < FAST_FOR_S:
        return base_s
    return max(base_s, SLOW_EVERY_S) * (1 + JITTER * rng())


def power_request_due(sent: int, elapsed_s: float) -> bool:
    """Send a power request now? The first at once, one more per minute of silence."""
    return sent < POWER_REQUESTS and elapsed_s >= sent * POWER_PATIENCE_S


def power_ignored(sent: int, elapsed_s: float) -> bool:
    """Three requests and a minute of silence after the last: the BMC ignores them."""
    return sent >= POWER_REQUESTS and elapsed_s >= POWER_REQUESTS * POWER_PATIENCE_S
