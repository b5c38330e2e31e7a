from __future__ import annotations

from enum import StrEnum

import pytest

from gpulease.domain.lifecycle import InvalidTransition, Machine, markdown, mermaid, move
from gpulease.domain.states import (
    AGENT_COMMAND,
    CLEAN_ORDER,
    DEPLOY_ORDER,
    INSTANCE,
    INSTANCE_STAGE,
    INVOICE,
    LEASE,
    MACHINES,
    NODE,
    NODE_STAGE,
    UNSAFE_TO_REPEAT,
    CommandStatus,
    InstanceStatus,
    InvoiceStatus,
    LeaseStatus,
    NodeStage,
    NodeStatus,
)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_state_says_what_it_means_and_can_be_reached(machine: Machine[StrEnum]) -> None:
    enum = type(next(iter(machine.states)))
    assert set(machine.states) == set(enum)  # every member of the enum is declared
    assert all(len(meaning) > 10 for meaning in machine.states.values())
    assert machine.reachable() == set(machine.states)
    assert all(t.meaning for t in machine.transitions)


@pytest.mark.parametrize(("current", "event", "target"), [
    (NodeStatus.AVAILABLE, "allocate", NodeStatus.ALLOCATED),
    (NodeStatus.ALLOCATED, "deploy", NodeStatus.DEPLOYING),
    (NodeStatus.DEPLOYING, "activate", NodeStatus.ACTIVE),
    (NodeStatus.ACTIVE, "clean", NodeStatus.CLEANING),
    (NodeStatus.CLEANING, "free", NodeStatus.AVAILABLE),
    (NodeStatus.DEPLOYING, "fail", NodeStatus.MAINTENANCE),
    (NodeStatus.CLEANING, "drain", NodeStatus.MAINTENANCE),
    (NodeStatus.ACTIVE, "request_drain", NodeStatus.ACTIVE),  # a note: the status stays
    (NodeStatus.MAINTENANCE, "resume", NodeStatus.AVAILABLE),
])
def test_node_lifecycle_moves(current: NodeStatus, event: str, target: NodeStatus) -> None:
    assert NODE.step(current, event) == target


@pytest.mark.parametrize(("current", "event"), [
    (NodeStatus.ACTIVE, "free"),  # never skip cleaning
    (NodeStatus.CLEANING, "allocate"),
    (NodeStatus.ENROLLING, "allocate"),
    (NodeStatus.MAINTENANCE, "activate"),
    (NodeStatus.ACTIVE, "set_aside"),  # a node in use is drained, not set aside
])
def test_illegal_node_moves_are_refused(current: NodeStatus, event: str) -> None:
    with pytest.raises(InvalidTransition, match=f"node: no '{event}' from {current.value}"):
        NODE.step(current, event)


def test_released_is_final_and_ready_cannot_go_back() -> None:
    assert INSTANCE.events_from(InstanceStatus.RELEASED) == []
    with pytest.raises(InvalidTransition):
        INSTANCE.step(InstanceStatus.READY, "deploy")
    assert INSTANCE.step(InstanceStatus.FAILED, "release") == InstanceStatus.RELEASING


def test_the_deploy_and_clean_pipelines_are_walked_by_advance() -> None:
    stage, walked = NODE_STAGE.step(NodeStage.IDLE, "deploy"), []
    while NODE_STAGE.allows(stage, "advance"):
        walked.append(stage)
        stage = NODE_STAGE.step(stage, "advance")
    assert (*walked, stage) == DEPLOY_ORDER
    assert NODE_STAGE.step(stage, "done") == NodeStage.IDLE
    stage = NODE_STAGE.step(NodeStage.CONFIGURE, "clean")  # cleaning starts anywhere
    walked = []
    while NODE_STAGE.allows(stage, "advance"):
        walked.append(stage)
        stage = NODE_STAGE.step(stage, "advance")
    assert (*walked, stage) == CLEAN_ORDER
    assert NODE_STAGE.parse(None) == NodeStage.IDLE and NODE_STAGE.stored(NodeStage.IDLE) is None


def test_the_other_lifecycles() -> None:
    assert LEASE.step(LeaseStatus.GRACE, "renew") == LeaseStatus.ACTIVE
    assert LEASE.step(LeaseStatus.ACTIVE, "expire") == LeaseStatus.GRACE
    assert LEASE.events_from(LeaseStatus.ENDED) == []
    assert INVOICE.step(InvoiceStatus.DRAFT, "finalize") == InvoiceStatus.FINAL
    with pytest.raises(InvalidTransition):
        INVOICE.step(InvoiceStatus.FINAL, "finalize")  # final never changes
    assert AGENT_COMMAND.step(CommandStatus.RUNNING, "succeed") == CommandStatus.DONE
    assert AGENT_COMMAND.finals == {CommandStatus.DONE, CommandStatus.FAILED}
    assert INSTANCE_STAGE.starts == {INSTANCE_STAGE.parse("ordered")}


def test_unsafe_steps_are_declared() -> None:
    assert {NodeStage.CONFIGURE.value} == UNSAFE_TO_REPEAT


class Door(StrEnum):
    OPEN = "open"
    SHUT = "shut"
    GONE = "gone"


def test_a_machine_refuses_a_bad_declaration() -> None:
    meaning = {Door.OPEN: "it is open", Door.SHUT: "it is shut", Door.GONE: "it was removed"}
    with pytest.raises(ValueError, match="unreachable states"):
        Machine("door", meaning, frozenset({Door.OPEN}),
                (move("close", [Door.OPEN], Door.SHUT, "close it"),))
    with pytest.raises(ValueError, match="two 'close' moves from open"):
        Machine("door", meaning, frozenset({Door.OPEN}),
                (move("close", [Door.OPEN], Door.SHUT, "close it"),
                 move("close", [Door.OPEN], Door.GONE, "or not")))
    with pytest.raises(ValueError, match="leaves a final state"):
        Machine("door", meaning, frozenset({Door.OPEN}),
                (move("remove", [Door.OPEN, Door.SHUT], Door.GONE, "remove it"),
                 move("close", [Door.OPEN], Door.SHUT, "close it"),
                 move("rebuild", [Door.GONE], Door.OPEN, "rebuild it")),
                finals=frozenset({Door.GONE}))


def test_the_tables_render_as_mermaid_and_markdown() -> None:
    chart = mermaid(INVOICE)
    assert chart.splitlines() == ["stateDiagram-v2", "    [*] --> draft",
                                  "    draft --> final: finalize", "    final --> [*]"]
    assert "idle --> power_off: deploy" in mermaid(NODE_STAGE)
    table = markdown(NODE)
    assert "| `request_drain` |" in table and "(stays)" in table
