"""How long a PostgreSQL session may wait or idle, and how a dead peer is noticed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionLimits:
    lock_timeout_s: float = 10.0
    statement_timeout_s: float = 60.0
    idle_in_transaction_timeout_s: float = 15.0
    keepalives_idle_s: int = 10
    keepalives_interval_s: int = 5
    keepalives_count: int = 3
    connect_timeout_s: int = 5

    def options(self) -> str:
        """The server settings every session starts with (libpq `options`)."""
        ms = {"lock_timeout": self.lock_timeout_s, "statement_timeout": self.statement_timeout_s,
              "idle_in_transaction_session_timeout": self.idle_in_transaction_timeout_s}
        return " ".join(f"-c {name}={round(value * 1000)}" for name, value in ms.items())

    def connect_args(self) -> dict[str, Any]:
        """libpq connection parameters: TCP keepalives and the connect timeout."""
        return {"keepalives": 1, "keepalives_idle": self.keepalives_idle_s,
                "keepalives_interval": self.keepalives_interval_s,
                "keepalives_count": self.keepalives_count,
                "connect_timeout": self.connect_timeout_s}
