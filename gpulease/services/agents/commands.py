"""The real node agent behind the agent port: commands it fetches over its own outbound
connection and results it posts back. Nothing needs to reach into the server. A pipeline
stage's first call files its command; later calls find the result (a worker that died and
was replaced takes it instead of asking twice). Commands move along the declared
agent-command lifecycle: pending -> running -> done | failed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.configdrive import hash_root_password
from gpulease.db.tables import AgentCommand, Node, NodeAgent
from gpulease.domain.errors import InvalidInput, NotFound
from gpulease.domain.fleet.acceptance import GpuSpec, Report, Thresholds
from gpulease.domain.states import AGENT_COMMAND, CommandStatus
from gpulease.drivers.on_behalf import before_change
from gpulease.lifecycle.history import agent
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.agent import (
    COMMAND_KINDS,
    RESULTS,
    AgentError,
    Command,
    CommandOutcome,
    CommandProgress,
    ConfigurePayload,
    ConfigureResult,
    ErasePayload,
    EraseResult,
    NodeConfig,
    NodeRef,
    Payload,
    Pending,
    Result,
    TransferPayload,
    TransferResult,
    VerifyPayload,
    VerifyResult,
)
from gpulease.ports.records import Driven, Moves, Records, Sealed
from gpulease.services.agents.credentials import authenticate_agent
from gpulease.services.agents.evidence import AcceptanceRun, record_acceptance

ON_DEMAND = "on_demand"  # the trigger of a command no pipeline stage waits for
_COMMANDS: TypeAdapter[Command] = TypeAdapter(Command)


class CommandQueueAgent:
    """The agent port for nodes running `gpulease agent`."""

    simulated = False
    enrolls_from_config_drive = True

    def __init__(self, p: Sealed) -> None:
        self.p = p

    def is_up(self, node: NodeRef) -> bool:
        """True once the node's agent enrolled or called in after the stage began (a fresh
        boot)."""
        with self.p.db.read() as s:
            row = s.get(NodeAgent, node.node_id)
            since = node.stage_started_at
            return row is not None and (since is None or row.last_seen_at >= since)

    def configure(self, node: NodeRef, config: NodeConfig) -> ConfigureResult | Pending:
        # cloud-init applied the config drive (hostname, data disk); the node passed its
        # acceptance: the agent puts the tenant's keys and password hash in place, confirms
        # them and reports the address the tenant will use.
        answer = self._ask(node, ConfigurePayload(
            hostname=config.hostname, ssh_keys=list(config.ssh_keys),
            root_password_hash=hash_root_password(config.root_password)
            if config.root_password else None))
        return answer if isinstance(answer, Pending) else ConfigureResult.model_validate(answer)

    def verify(self, node: NodeRef, thresholds: Thresholds, spec: GpuSpec) -> Report | Pending:
        answer = self._ask(node, VerifyPayload(thresholds=thresholds, spec=spec))
        return answer if isinstance(answer, Pending) else (
            VerifyResult.model_validate(answer).report())

    def erase(self, node: NodeRef, lease: str | None = None) -> EraseResult | Pending:
        answer = self._ask(node, ErasePayload(lease=lease))
        return answer if isinstance(answer, Pending) else EraseResult.model_validate(answer)

    def transfer(self, node: NodeRef, payload: TransferPayload,
                 progress: Callable[[int, int], None] | None = None
                 ) -> TransferResult | Pending:
        answer = self._ask(node, payload)  # its progress: posted by the agent (progress_of)
        return answer if isinstance(answer, Pending) else TransferResult.model_validate(answer)

    def _ask(self, node: NodeRef, payload: Payload) -> dict[str, Any] | Pending:
        """The command's result once the agent posted it; Pending until then. Raises
        AgentError (not retryable: the agent already tried) when the agent reports
        failure."""
        kind = COMMAND_KINDS[type(payload)]
        cmd = None if node.stage is None else self._latest(node, kind)
        if cmd is None:
            before_change(f"agent {kind}")  # filed only under a fresh claim (fence.py)
            with self.p.db.write() as s:
                return Pending(submit(s, self.p, Recipient(
                    node.node_id, node.instance_id, node.stage or ON_DEMAND), payload,
                    self.p.clock.now()))
        if cmd.status == CommandStatus.FAILED.value:
            err = AgentError(f"node agent {kind} failed: {cmd.error}")
            err.retryable = False
            raise err
        if cmd.status != CommandStatus.DONE.value:
            return Pending(cmd.id)
        result: dict[str, Any] = json.loads(cmd.result_json or "{}")
        return result

    def _latest(self, node: NodeRef, kind: str) -> AgentCommand | None:
        """The newest command of this kind filed by this stage since it began."""
        with self.p.db.read() as s:
            q = select(AgentCommand).where(AgentCommand.node_id == node.node_id,
                                           AgentCommand.kind == kind,
                                           AgentCommand.trigger == node.stage)
            if node.stage_started_at is not None:
                q = q.where(AgentCommand.created_at >= node.stage_started_at)
            row = s.scalars(q.order_by(AgentCommand.created_at.desc()).limit(1)).first()
            if row is not None:
                s.expunge(row)
            return row


@dataclass(frozen=True)
class Recipient:
    """Which node's agent a command is for, for which instance, and why: the pipeline
    stage that asks, or on demand."""

    node_id: str
    instance_id: str | None
    trigger: str


def submit(s: Session, p: Sealed, to: Recipient, payload: BaseModel, now: datetime) -> str:
    """File a command for the agent to fetch; its id."""
    command_id = uuid.uuid4().hex
    s.add(AgentCommand(id=command_id, node_id=to.node_id, instance_id=to.instance_id,
                       kind=COMMAND_KINDS[type(payload)], trigger=to.trigger,
                       payload_enc=p.box.seal(payload.model_dump_json()), created_at=now,
                       **initial(AgentCommand, AGENT_COMMAND)))
    return command_id


def fetch(p: Driven, credential: str | None) -> list[Command]:
    """The agent's pending commands, marked running; the call also counts as a heartbeat."""
    now = p.clock.now()
    with p.db.write() as s:
        node_agent = authenticate_agent(s, credential)
        node_agent.last_seen_at = now
        rows = s.scalars(select(AgentCommand).where(
            AgentCommand.node_id == node_agent.node_id,
            AgentCommand.status == CommandStatus.PENDING.value)
            .order_by(AgentCommand.created_at).with_for_update()).all()
        out = []
        for row in rows:
            transition(s, p, row, AGENT_COMMAND, "fetch", Move(now, actor=agent(row.node_id)))
            row.claimed_at = now
            out.append(_COMMANDS.validate_python({
                "id": row.id, "kind": row.kind, "instance_id": row.instance_id,
                "payload": json.loads(p.box.open(row.payload_enc))}))
        return out


def _result(kind: str, outcome: CommandOutcome) -> Result:
    try:
        return RESULTS[kind].model_validate(outcome.result or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "result"
        raise InvalidInput("result", "The {kind} result is not understood ({where}: "
                                     "{error}); post what this control plane's "
                                     "agent version sends.",
                           kind=kind, where=where, error=first['msg']) from None


def _own_open_command(s: Session, credential: str | None, command_id: str, now: datetime
                      ) -> AgentCommand | None:
    """The calling agent's command, locked (the call counts as a heartbeat); None once it
    has ended (a repeated or late post changes nothing). 404 for another node's."""
    node_agent = authenticate_agent(s, credential)
    node_agent.last_seen_at = now
    row = s.get(AgentCommand, command_id, with_for_update=True)
    if row is None or row.node_id != node_agent.node_id:
        raise NotFound("No command {command_id} for this node.", command_id=command_id)
    return None if AGENT_COMMAND.parse(row.status) in AGENT_COMMAND.finals else row


def post_result(p: Moves, credential: str | None, command_id: str,
                outcome: CommandOutcome) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        row = _own_open_command(s, credential, command_id, now)
        if row is None:
            return  # a repeated post (the agent retried after a lost answer): same outcome
        who = agent(row.node_id)
        if outcome.ok:
            result = _result(row.kind, outcome)
            if isinstance(result, VerifyResult) and row.trigger == ON_DEMAND:
                node = s.get(Node, row.node_id)
                assert node is not None
                record_acceptance(s, p, node, AcceptanceRun(result.report(), ON_DEMAND,
                                                             row.instance_id, who), now)
            row.result_json = result.model_dump_json()
            transition(s, p, row, AGENT_COMMAND, "succeed", Move(now, actor=who))
        else:
            row.error = outcome.error or "the agent gave no reason"
            transition(s, p, row, AGENT_COMMAND, "fail", Move(now, actor=who,
                                                              reason=row.error[:500]))
        row.finished_at = now
    p.wake()


def post_progress(p: Records, credential: str | None, command_id: str,
                  progress: CommandProgress) -> None:
    """A running command's progress (bytes moved of bytes to move); also a heartbeat."""
    with p.db.write() as s:
        row = _own_open_command(s, credential, command_id, p.clock.now())
        if row is None:
            return  # it ended: a late report changes nothing
        row.progress_moved = min(progress.moved, progress.total)
        row.progress_total = progress.total


def progress_of(p: Records, command_id: str | None) -> tuple[int, int] | None:
    """(moved, total) the agent last posted for a command, if any."""
    if command_id is None:
        return None
    with p.db.read() as s:
        row = s.execute(select(AgentCommand.progress_moved, AgentCommand.progress_total)
                        .where(AgentCommand.id == command_id)).one_or_none()
    if row is None or row[0] is None or row[1] is None:
        return None
    return int(row[0]), int(row[1])
