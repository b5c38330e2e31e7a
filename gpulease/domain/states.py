"""Declared state machines for nodes and instances.

Every status change goes through `check_node_transition` / `check_instance_transition`
(called by the one switch function per resource in services), so an illegal move is
refused in one place instead of being scattered through the code.
"""

from __future__ import annotations

from enum import StrEnum


class NodeStatus(StrEnum):
    ENROLLING = "enrolling"
    AVAILABLE = "available"
    ALLOCATED = "allocated"
    DEPLOYING = "deploying"
    ACTIVE = "active"
    CLEANING = "cleaning"
    MAINTENANCE = "maintenance"
    FAILED = "failed"


class InstanceStatus(StrEnum):
    PENDING = "pending"
    DEPLOYING = "deploying"
    READY = "ready"
    RELEASING = "releasing"
    RELEASED = "released"
    FAILED = "failed"


class InvalidTransition(Exception):
    def __init__(self, kind: str, current: str, target: str) -> None:
        super().__init__(f"{kind} cannot go from {current} to {target}")
        self.kind, self.current, self.target = kind, current, target


N = NodeStatus
NODE_TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    N.ENROLLING: frozenset({N.AVAILABLE, N.MAINTENANCE, N.FAILED}),
    # A shared (container) node stays available while hosting GPU slices.
    N.AVAILABLE: frozenset({N.ALLOCATED, N.MAINTENANCE, N.FAILED, N.CLEANING}),
    N.ALLOCATED: frozenset({N.DEPLOYING, N.CLEANING, N.AVAILABLE, N.MAINTENANCE}),
    N.DEPLOYING: frozenset({N.ACTIVE, N.CLEANING, N.MAINTENANCE, N.FAILED}),
    N.ACTIVE: frozenset({N.CLEANING, N.MAINTENANCE, N.FAILED}),
    N.CLEANING: frozenset({N.AVAILABLE, N.MAINTENANCE, N.FAILED}),
    N.MAINTENANCE: frozenset({N.AVAILABLE, N.CLEANING, N.FAILED, N.ENROLLING}),
    N.FAILED: frozenset({N.MAINTENANCE, N.ENROLLING}),
}

IS = InstanceStatus
INSTANCE_TRANSITIONS: dict[InstanceStatus, frozenset[InstanceStatus]] = {
    IS.PENDING: frozenset({IS.DEPLOYING, IS.READY, IS.FAILED, IS.RELEASING}),
    IS.DEPLOYING: frozenset({IS.READY, IS.FAILED, IS.RELEASING}),
    IS.READY: frozenset({IS.RELEASING, IS.FAILED}),
    IS.RELEASING: frozenset({IS.RELEASED}),
    IS.RELEASED: frozenset(),
    IS.FAILED: frozenset({IS.RELEASING, IS.RELEASED}),
}

# Statuses in which a node holds (or is on its way to hold) a tenant's instance.
NODE_BUSY = frozenset({N.ALLOCATED, N.DEPLOYING, N.ACTIVE})
INSTANCE_LIVE = frozenset({IS.PENDING, IS.DEPLOYING, IS.READY, IS.RELEASING})


def check_node_transition(current: NodeStatus, target: NodeStatus) -> None:
    if current != target and target not in NODE_TRANSITIONS[current]:
        raise InvalidTransition("node", current.value, target.value)


def check_instance_transition(current: InstanceStatus, target: InstanceStatus) -> None:
    if current != target and target not in INSTANCE_TRANSITIONS[current]:
        raise InvalidTransition("instance", current.value, target.value)


class DeployStage(StrEnum):
    """Per-node steps of a bare-metal deploy, in order."""

    POWER_OFF = "power_off"
    ATTACH_MEDIA = "attach_media"
    POWER_ON = "power_on"
    WAIT_AGENT = "wait_agent"
    CONFIGURE = "configure"
    VERIFY = "verify"  # the acceptance suite: a failing node never reaches the tenant
    DETACH_MEDIA = "detach_media"


class CleanStage(StrEnum):
    """Per-node steps of cleaning after release or a failed deploy. Erasure always runs
    from a freshly booted agent ramdisk, never from the tenant's system."""

    SHUTDOWN = "clean_shutdown"
    ATTACH_MEDIA = "clean_attach_media"
    POWER_ON = "clean_power_on"
    WAIT_AGENT = "clean_wait_agent"
    ERASE = "erase"
    POWER_OFF = "clean_power_off"


DEPLOY_ORDER: tuple[DeployStage, ...] = tuple(DeployStage)
CLEAN_ORDER: tuple[CleanStage, ...] = tuple(CleanStage)

# CONFIGURE formats and mounts the data disk and writes credentials through the agent; a
# worker that died in the middle of it leaves the machine half-configured, so the step is
# not re-run blindly: the deploy fails with a reason and the node is cleaned. Every other
# step (power, media, polling, erase) is idempotent and is simply run again.
UNSAFE_TO_REPEAT: frozenset[str] = frozenset({DeployStage.CONFIGURE.value})
