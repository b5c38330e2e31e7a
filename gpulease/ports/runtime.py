"""The container runtime port: GPU slices of a shared server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class RuntimeError_(Exception):
    retryable = True


@dataclass(frozen=True)
class ContainerSpec:
    instance_id: str
    node_name: str
    gpu_indices: tuple[int, ...]
    image_id: str
    ssh_keys: tuple[str, ...]
    # The shared server's Docker engine (unix://, tcp:// or ssh://); None: simulated host.
    engine_url: str | None = None
    root_password_hash: str | None = None  # crypt(3) hash; None: no password login


@dataclass(frozen=True)
class ContainerHandle:
    container_id: str
    ip_address: str
    ssh_port: int


class ContainerRuntime(Protocol):
    def start(self, spec: ContainerSpec) -> ContainerHandle:
        """Start (or find already started) the instance's container. Raises RuntimeError_."""
        ...

    def stop(self, instance_id: str, node_name: str, engine_url: str | None = None) -> None:
        """Stop and remove it; a no-op when absent. Raises RuntimeError_."""
        ...
