from __future__ import annotations

import pytest

from gpulease.domain.states import (
    INSTANCE_TRANSITIONS,
    NODE_TRANSITIONS,
    UNSAFE_TO_REPEAT,
    DeployStage,
    InstanceStatus,
    InvalidTransition,
    NodeStatus,
    check_instance_transition,
    check_node_transition,
)


def test_every_status_has_a_row() -> None:
    assert set(NODE_TRANSITIONS) == set(NodeStatus)
    assert set(INSTANCE_TRANSITIONS) == set(InstanceStatus)


@pytest.mark.parametrize(("current", "target"), [
    (NodeStatus.AVAILABLE, NodeStatus.ALLOCATED),
    (NodeStatus.ALLOCATED, NodeStatus.DEPLOYING),
    (NodeStatus.DEPLOYING, NodeStatus.ACTIVE),
    (NodeStatus.ACTIVE, NodeStatus.CLEANING),
    (NodeStatus.CLEANING, NodeStatus.AVAILABLE),
    (NodeStatus.DEPLOYING, NodeStatus.MAINTENANCE),
])
def test_node_lifecycle_moves(current: NodeStatus, target: NodeStatus) -> None:
    check_node_transition(current, target)


@pytest.mark.parametrize(("current", "target"), [
    (NodeStatus.ACTIVE, NodeStatus.AVAILABLE),  # never skip cleaning
    (NodeStatus.CLEANING, NodeStatus.ALLOCATED),
    (NodeStatus.ENROLLING, NodeStatus.ALLOCATED),
    (NodeStatus.MAINTENANCE, NodeStatus.ACTIVE),
])
def test_illegal_node_moves_are_refused(current: NodeStatus, target: NodeStatus) -> None:
    with pytest.raises(InvalidTransition, match=f"node cannot go from {current.value}"):
        check_node_transition(current, target)


def test_released_is_final_and_ready_cannot_go_back() -> None:
    for target in InstanceStatus:
        if target is not InstanceStatus.RELEASED:
            with pytest.raises(InvalidTransition):
                check_instance_transition(InstanceStatus.RELEASED, target)
    with pytest.raises(InvalidTransition):
        check_instance_transition(InstanceStatus.READY, InstanceStatus.DEPLOYING)


def test_unsafe_steps_are_declared() -> None:
    assert {DeployStage.CONFIGURE.value} == UNSAFE_TO_REPEAT
