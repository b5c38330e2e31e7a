"""The node agent port: the software on a booted server that configures and erases it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpulease.domain.acceptance import GpuSpec, Report, Thresholds
from gpulease.ports.bmc import BmcEndpoint


class AgentError(Exception):
    retryable = True


@dataclass(frozen=True)
class NodeRef:
    """Which server an agent call is about (and its BMC, for agents that watch it)."""

    name: str
    bmc_driver: str
    endpoint: BmcEndpoint


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
    # One certificate per device (agent/erase.Certificate.as_dict()); stored and served.
    certificates: tuple[dict[str, Any], ...] = ()


class Agent(Protocol):
    def is_up(self, node: NodeRef) -> bool:
        """True once the node's agent has phoned home since its last boot."""
        ...

    def configure(self, node: NodeRef, config: NodeConfig) -> ConfigureResult:
        """Format and mount the data disk, write keys and password. Raises AgentError."""
        ...

    def erase(self, node: NodeRef, lease: str | None = None) -> EraseResult:
        """Erase every tenant-writable disk and certify each. Raises AgentError."""
        ...

    def verify(self, node: NodeRef, thresholds: Thresholds, spec: GpuSpec) -> Report:
        """Run the acceptance suite on the node and return its judged report."""
        ...
