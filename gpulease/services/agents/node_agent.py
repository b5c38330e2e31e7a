"""Which agent answers for a node, and what asks it outside the pipeline (verification on
demand). A node's `agent_kind` picks: `builtin` (its BMC driver's stand-in, on simulated
servers) or `gpulease` (the real agent, through its command queue). Both are the same
port (ports/agent.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance, instance_allocations
from gpulease.db.tables import AcceptanceReport, AgentCommand, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, TooManyRequests
from gpulease.domain.states import CommandStatus, InstanceStatus, NodeStatus
from gpulease.lifecycle.history import by
from gpulease.ports.agent import Agent, NodeRef, Pending
from gpulease.ports.bmc import BmcEndpoint
from gpulease.ports.records import Driven, Records, Sealed
from gpulease.services.agents.commands import CommandQueueAgent
from gpulease.services.agents.evidence import AcceptanceRun, record_acceptance

AGENT_KINDS: dict[str, Callable[[Driven, str], Agent]] = {
    "builtin": lambda p, bmc_driver: p.drivers.agent_for(bmc_driver),
    "gpulease": lambda p, _bmc_driver: CommandQueueAgent(p),
}


def agent_for(p: Driven, agent_kind: str, bmc_driver: str) -> Agent:
    try:
        return AGENT_KINDS[agent_kind](p, bmc_driver)
    except KeyError:
        raise LookupError(f"unknown agent kind {agent_kind!r}; known: "
                          f"{', '.join(sorted(AGENT_KINDS))}") from None


def is_simulated(p: Driven, bmc_driver: str, agent_kind: str) -> bool:
    """Simulated hardware (the simulated BMC driver), or a simulated stand-in agent."""
    if bmc_driver == "simulated":
        return True
    try:
        return agent_for(p, agent_kind, bmc_driver).simulated
    except LookupError:
        return False


def node_ref(p: Sealed, node: Node, stage: str | None = None) -> NodeRef:
    return NodeRef(node.id, node.name, node.bmc_driver,
                   BmcEndpoint(node.name, node.bmc_address, node.bmc_username,
                               p.box.open(node.bmc_password_enc)),
                   instance_id=node.instance_id, stage=stage,
                   stage_started_at=node.stage_started_at if stage else None)


class VerifyRun(BaseModel):
    """One node's on-demand verification: done at once (a stand-in agent), or queued for
    the node's agent (its report lands in the instance's reports when it answers)."""

    node: str
    status: Literal["queued", "done"]
    command: str | None = None
    report: str | None = None
    passed: bool | None = None


def _one_run_at_a_time(s: Session, p: Records, instance_id: str) -> None:
    """A burn-in loads every GPU for minutes: one run per instance at a time, and the next
    no sooner than GPULEASE_VERIFY_MIN_INTERVAL_S after the last one started."""
    running = s.scalar(select(AgentCommand.id).where(
        AgentCommand.instance_id == instance_id, AgentCommand.kind == "verify",
        AgentCommand.status.in_((CommandStatus.PENDING.value, CommandStatus.RUNNING.value)))
        .limit(1))
    if running is not None:
        raise Conflict("An acceptance run of {instance_id} is under way ({running}); its "
                       "report appears under /acceptance when it ends.",
                       instance_id=instance_id, running=running)
    last = max((at for at in (
        s.scalar(select(func.max(AcceptanceReport.created_at)).where(
            AcceptanceReport.instance_id == instance_id,
            AcceptanceReport.trigger == "on_demand")),
        s.scalar(select(func.max(AgentCommand.created_at)).where(
            AgentCommand.instance_id == instance_id, AgentCommand.kind == "verify",
            AgentCommand.trigger == "on_demand"))) if at is not None), default=None)
    if last is None:
        return
    ago = (p.clock.now() - last).total_seconds()
    wait = p.settings.verify_min_interval_s - ago
    if wait > 0:
        raise TooManyRequests("{instance_id} was verified {ago:.0f} s ago; runs are at "
                              "least {value:.0f} s apart.",
                              retry_after_s=int(wait) + 1,
                              instance_id=instance_id, ago=ago,
                              value=p.settings.verify_min_interval_s)


def verify_now(p: Driven, actor: Principal, instance_id: str) -> list[VerifyRun]:
    """Run the acceptance suite on demand on every node the instance holds."""
    actor.require_order_rights()
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        if inst.status != InstanceStatus.READY.value:
            raise Conflict("Instance {instance} is {status}; verification runs on a ready "
                           "instance.", instance=inst.id, status=inst.status)
        _one_run_at_a_time(s, p, inst.id)
        asks = []
        for node, _, held in instance_allocations(s, inst.id):
            marks = p.catalog.marks(node.sku, node.region)
            if held and node.pool == "bare_metal" and node.status == NodeStatus.ACTIVE.value \
                    and marks is not None:
                asks.append((node.id, node_ref(p, node),
                             agent_for(p, node.agent_kind, node.bmc_driver), marks))
        if not asks:
            raise Conflict("Instance {instance} holds no bare-metal node to verify "
                           "(containers share their host's delivery report).", instance=inst.id)
    runs: list[VerifyRun] = []
    for node_id, ref, node_agent, (thresholds, spec) in asks:  # I/O outside transactions
        report = node_agent.verify(ref, thresholds, spec)
        if isinstance(report, Pending):
            runs.append(VerifyRun(node=ref.name, status="queued", command=report.reference))
            continue
        with p.db.write() as s:
            row = s.get(Node, node_id)
            assert row is not None
            rid = record_acceptance(s, p, row, AcceptanceRun(report, "on_demand", inst.id,
                                                             by(actor)), p.clock.now())
        runs.append(VerifyRun(node=ref.name, status="done", report=rid, passed=report.passed))
    p.wake()
    return runs
