"""The container runtime port: GPU slices of a shared server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class RuntimeError_(Exception):
    retryable = True


@dataclass(frozen=True)
class ContainerLimits:
    """The container's share of its host; None: unlimited (the simulated host)."""

    cpus: float | None = None
    memory_bytes: int | None = None
    pids: int | None = None


@dataclass(frozen=True)
class ContainerSpec:
    instance_id: str
    node_name: str
    gpu_indices: tuple[int, ...]
    image_id: str
    ssh_keys: tuple[str, ...]
    # The shared server's Docker engine (unix://, tcp:// or ssh://); None: simulated host.
    engine_url: str | None = None
    # The one-time root password (the runtime stores only its hash); None: keys only.
    root_password: str | None = field(default=None, repr=False)
    # Containers of one tenant share a network; no other tenant's container is on it.
    tenant_id: str = ""
    limits: ContainerLimits = ContainerLimits()
    password_login: bool = False  # root may log in over SSH with the password; else keys
    # The tenant's saved image (registry/repository:tag), pulled when the host lacks it;
    # None: the catalog image's container build.
    image_ref: str | None = None


@dataclass(frozen=True)
class SavedImageResult:
    reference: str
    digest: str
    size_bytes: int


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
        """Stop and remove it with its data volume; a no-op when absent. Raises
        RuntimeError_."""
        ...

    def restart(self, instance_id: str, node_name: str, engine_url: str | None = None
                ) -> ContainerHandle:
        """Restart the instance's container (its processes end; its writable layer and data
        volume stay) and return where SSH now answers (an engine may publish it on another
        port). Raises RuntimeError_, not retryable when there is no container."""
        ...

    def save(self, instance_id: str, node_name: str, engine_url: str | None,
             reference: str) -> SavedImageResult:
        """Commit the instance's running container as `reference` (registry/repo:tag) and
        push it there; its data volume is not part of it. Raises RuntimeError_."""
        ...
