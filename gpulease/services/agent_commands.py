"""Commands for real node agents. The worker's step files a command and polls for its
result; the agent fetches work over its own outbound connection and posts results back.
Nothing needs to reach into the server, and a step that finds its result already there
(a worker that died and was replaced) takes it instead of asking twice."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance, instance_allocations
from gpulease.db.tables import AgentCommand, Node, NodeAgent
from gpulease.domain.acceptance import Check, GpuSpec, Report, Thresholds
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.services.agents import authenticate_agent, record_acceptance

KINDS = ("configure", "verify", "erase")


def submit(s: Session, p: Platform, node_id: str, instance_id: str | None, kind: str,
           trigger: str, payload: dict[str, Any], now: datetime) -> str:
    command_id = uuid.uuid4().hex
    s.add(AgentCommand(id=command_id, node_id=node_id, instance_id=instance_id, kind=kind,
                       trigger=trigger, payload_enc=p.box.seal(json.dumps(payload)),
                       status="pending", created_at=now))
    return command_id


def latest(p: Platform, node_id: str, kind: str, trigger: str, since: datetime | None
           ) -> AgentCommand | None:
    """The newest command of this kind filed by this stage since it began."""
    with p.db.read() as s:
        q = select(AgentCommand).where(AgentCommand.node_id == node_id,
                                       AgentCommand.kind == kind,
                                       AgentCommand.trigger == trigger)
        if since is not None:
            q = q.where(AgentCommand.created_at >= since)
        row = s.scalars(q.order_by(AgentCommand.created_at.desc()).limit(1)).first()
        if row is not None:
            s.expunge(row)
        return row


def agent_seen_since(p: Platform, node_id: str, since: datetime | None) -> bool:
    """True once the node's agent enrolled or called in after `since` (a fresh boot)."""
    with p.db.read() as s:
        agent = s.get(NodeAgent, node_id)
        return agent is not None and (since is None or agent.last_seen_at >= since)


def fetch(p: Platform, credential: str | None) -> list[dict[str, Any]]:
    """The agent's pending commands, marked running; the call also counts as a heartbeat."""
    now = p.clock.now()
    with p.db.write() as s:
        agent = authenticate_agent(s, credential)
        agent.last_seen_at = now
        rows = s.scalars(select(AgentCommand).where(
            AgentCommand.node_id == agent.node_id, AgentCommand.status == "pending")
            .order_by(AgentCommand.created_at).with_for_update()).all()
        out = []
        for row in rows:
            row.status, row.claimed_at = "running", now
            out.append({"id": row.id, "kind": row.kind, "instance_id": row.instance_id,
                        "payload": json.loads(p.box.open(row.payload_enc))})
        return out


def _report(data: dict[str, Any]) -> Report:
    checks = tuple(Check(**c) for c in data.get("checks", []))
    return Report(passed=bool(data["passed"]), checks=checks,
                  simulated=bool(data.get("simulated", False)),
                  driver_version=data.get("driver_version"),
                  cuda_version=data.get("cuda_version"), notes=tuple(data.get("notes", ())))


def report_from(data: dict[str, Any]) -> Report:
    try:
        return _report(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput("result", f"acceptance report not understood: {exc}") from None


def post_result(p: Platform, credential: str | None, command_id: str, ok: bool,
                result: dict[str, Any] | None, error: str | None) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        agent = authenticate_agent(s, credential)
        agent.last_seen_at = now
        row = s.get(AgentCommand, command_id, with_for_update=True)
        if row is None or row.node_id != agent.node_id:
            raise NotFound(f"No command {command_id} for this node.")
        if row.status in ("done", "failed"):
            return  # a repeated post (the agent retried after a lost answer): same outcome
        if ok and row.kind == "verify":
            report = report_from(result or {})
            if row.trigger == "on_demand":
                node = s.get(Node, row.node_id)
                assert node is not None
                record_acceptance(s, node, row.instance_id, report, "on_demand", now)
        row.status = "done" if ok else "failed"
        row.result_json = json.dumps(result) if result is not None else None
        row.error = error
        row.finished_at = now
    p.wake()


def verify_now(p: Platform, actor: Principal, instance_id: str) -> list[dict[str, Any]]:
    """Run the acceptance suite on demand on every node the instance holds: queued for a
    real agent (the report lands in the instance's reports when it answers), run at once by
    a builtin stand-in."""
    from gpulease.ports.agent import NodeRef
    from gpulease.ports.bmc import BmcEndpoint

    actor.require_order_rights()
    now = p.clock.now()
    runs: list[tuple[str, str, str, BmcEndpoint, tuple[Thresholds, GpuSpec]]] = []
    out: list[dict[str, Any]] = []
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id)
        if inst.status != InstanceStatus.READY.value:
            raise Conflict(f"Instance {inst.id} is {inst.status}; verification runs on a ready "
                           "instance.")
        for node, _, held in instance_allocations(s, inst.id):
            if not held or node.pool != "bare_metal" or node.status != "active":
                continue
            marks = p.catalog.marks(node.sku, node.region)
            if marks is None:
                continue
            thresholds, spec = marks
            if node.agent_kind == "gpulease":
                cid = submit(s, p, node.id, inst.id, "verify", "on_demand",
                             {"thresholds": thresholds.as_dict(), "spec": asdict(spec)}, now)
                out.append({"node": node.name, "status": "queued", "command": cid})
            else:
                runs.append((node.id, node.name, node.bmc_driver, BmcEndpoint(
                    node.name, node.bmc_address, node.bmc_username,
                    p.box.open(node.bmc_password_enc)), marks))
        if not out and not runs:
            raise Conflict(f"Instance {inst.id} holds no bare-metal node to verify "
                           "(containers share their host's delivery report).")
    for node_id, name, driver, endpoint, marks in runs:  # I/O outside the transaction
        report = p.drivers.agent_for(driver).verify(NodeRef(name, driver, endpoint), *marks)
        with p.db.write() as s:
            node = s.get(Node, node_id)
            assert node is not None
            rid = record_acceptance(s, node, instance_id, report, "on_demand", p.clock.now())
        out.append({"node": name, "status": "done", "report": rid, "passed": report.passed})
    p.wake()
    return out

