"""The deploy circuit breaker's judgement: when the most recent deploys all failed the
same way, the fault is rarely the servers (agents cannot phone home, the media server is
down, a BMC network is cut), and sending more nodes to maintenance would empty the pool.
No I/O here."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_VARIABLE = re.compile(
    # tokens, UUIDs and node names (with a digit; not words such as BmcPermanentError)
    r"(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{16,}|"
    r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|"  # IPv4 addresses and ports
    r"\[[0-9a-f:]+\](?::\d+)?|"  # IPv6 addresses
    r"\b[a-z]+[-_][0-9a-z]{6,}\b|"  # ids such as node-3f2a9c1b or cmd_ab12cd34
    r"\d+(?:\.\d+)?", re.IGNORECASE)


@dataclass(frozen=True)
class DeployOutcome:
    ok: bool
    reason: str | None = None  # why it failed


def signature(reason: str) -> str:
    """A failure's reason with what differs from node to node (addresses, ids, numbers,
    attempt counts) taken out: two nodes failing the same way have the same signature."""
    text = _VARIABLE.sub("#", reason.lower())
    return re.sub(r"\s+", " ", text).strip()[:160]


def should_trip(newest_first: Sequence[DeployOutcome], failures: int) -> str | None:
    """The shared signature when the latest `failures` deploys all failed the same way."""
    latest = newest_first[:failures]
    if len(latest) < failures or any(o.ok for o in latest):
        return None
    signatures = {signature(o.reason or "") for o in latest}
    return signatures.pop() if len(signatures) == 1 else None
