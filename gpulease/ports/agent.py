"""The node agent port: the software on a booted server that configures and erases it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class AgentError(Exception):
    retryable = True


@dataclass(frozen=True)
class NodeConfig:
    hostname: str
    ssh_keys: tuple[str, ...]
    root_password: str  # sent over the agent's authenticated channel; never logged
    data_disk_mount: str = "/data"


@dataclass(frozen=True)
class ConfigureResult:
    ip_address: str


@dataclass(frozen=True)
class EraseResult:
    devices: tuple[str, ...]
    method: str
    simulated: bool = False
    details: dict[str, str] = field(default_factory=dict)


class Agent(Protocol):
    def is_up(self, node_name: str) -> bool:
        """True once the node's agent has phoned home since its last boot."""
        ...

    def configure(self, node_name: str, config: NodeConfig) -> ConfigureResult:
        """Format and mount the data disk, write keys and password. Raises AgentError."""
        ...

    def erase(self, node_name: str) -> EraseResult:
        """Erase every tenant-writable disk. Raises AgentError."""
        ...
