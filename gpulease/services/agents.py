"""Node agents seen from the control plane: enrollment tokens, credentials, telemetry
summaries and the alerts raised from them, acceptance reports and erase certificates."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance, instance_allocations
from gpulease.db.tables import (
    AcceptanceReport,
    AgentEnrollment,
    EraseCertificate,
    HardwareAlert,
    Node,
    NodeAgent,
    TelemetrySummary,
)
from gpulease.domain.acceptance import Report
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Forbidden, InvalidInput, NotFound, Unauthorized
from gpulease.domain.phrases import stored
from gpulease.domain.telemetry import Alert, GpuSummary, alerts_for
from gpulease.platform import Platform
from gpulease.security import hash_token
from gpulease.services import sla, tickets
from gpulease.services.history import agent as agent_actor

ENROLL_PREFIX = "glat_"  # one-time, from the config drive or an operator
CREDENTIAL_PREFIX = "glan_"  # the agent's own credential afterwards
ENROLL_TTL = timedelta(hours=24)


def mint_enrollment(s: Session, node_id: str, instance_id: str | None, now: datetime,
                    token: str | None = None) -> str:
    token = token or ENROLL_PREFIX + secrets.token_urlsafe(32)
    s.add(AgentEnrollment(token_hash=hash_token(token), node_id=node_id,
                          instance_id=instance_id, created_at=now,
                          expires_at=now + ENROLL_TTL))
    return token


def operator_enrollment(p: Platform, actor: Principal, node_id: str) -> str:
    """A fresh one-time token for a node's agent (after a reinstall, or a manual setup)."""
    if not actor.is_operator:
        raise Forbidden("Only an operator can mint agent enrollment tokens.")
    with p.db.write() as s:
        node = s.get(Node, node_id) or s.scalar(select(Node).where(Node.name == node_id))
        if node is None:
            raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
        return mint_enrollment(s, node.id, node.instance_id, p.clock.now())


def register(p: Platform, token: str, hostname: str, address: str | None,
             inventory: dict[str, Any] | None) -> tuple[str, str]:
    """Trade a one-time enrollment token for a node credential: (node id, credential)."""
    if not token.startswith(ENROLL_PREFIX):
        raise Unauthorized("That is not an agent enrollment token (they start with "
                           "{enroll_prefix!r}); it is on the config drive, or an operator "
                           "mints one with `gpulease node agent-token NODE`.",
                           enroll_prefix=ENROLL_PREFIX)
    now = p.clock.now()
    credential = CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    with p.db.write() as s:
        enrollment = s.get(AgentEnrollment, hash_token(token), with_for_update=True)
        if enrollment is None or enrollment.used_at is not None or enrollment.expires_at < now:
            raise Unauthorized("This enrollment token is unknown, used or expired; ask the "
                               "operator for a new one (`gpulease node agent-token NODE`).")
        enrollment.used_at = now
        agent = s.get(NodeAgent, enrollment.node_id)
        simulated = bool((inventory or {}).get("simulated_gpus", False))
        if agent is None:
            agent = NodeAgent(node_id=enrollment.node_id, registered_at=now)
            s.add(agent)
        agent.credential_hash = hash_token(credential)  # a re-enrollment revokes the old one
        agent.hostname, agent.address, agent.simulated = hostname, address, simulated
        agent.registered_at = agent.last_seen_at = now
        agent.inventory_json = json.dumps(inventory) if inventory is not None else None
        return enrollment.node_id, credential


def authenticate_agent(s: Session, credential: str | None) -> NodeAgent:
    if not credential or not credential.startswith(CREDENTIAL_PREFIX):
        raise Unauthorized("Send the agent credential: 'Authorization: Bearer "
                           "{credential_prefix}...'.", credential_prefix=CREDENTIAL_PREFIX)
    agent = s.scalar(select(NodeAgent).where(
        NodeAgent.credential_hash == hash_token(credential)))
    if agent is None:
        raise Unauthorized("Unknown or replaced agent credential; enroll the agent again.")
    return agent


def _phrase_json(alert: Alert) -> str | None:
    return stored(alert.phrase)[1] if alert.phrase is not None else None


def _sync_alerts(s: Session, p: Platform, node: Node, summaries: Sequence[GpuSummary],
                 now: datetime) -> list[dict[str, Any]]:
    """Open an alert the window shows, refresh one still shown, close one no longer shown."""
    raised = {(a.gpu, a.kind.value): a for a in alerts_for(summaries)}
    reported = {g.index for g in summaries}
    open_rows = s.scalars(select(HardwareAlert).where(
        HardwareAlert.node_id == node.id, HardwareAlert.closed_at.is_(None),
        HardwareAlert.source == "agent")).all()  # the BMC's alerts close by its health
    seen = set()
    for row in open_rows:
        key = (row.gpu_index, row.kind)
        if key in raised:
            row.last_seen_at, row.message = now, raised[key].message
            row.phrase = _phrase_json(raised[key])
            seen.add(key)
        elif row.gpu_index in reported:
            row.closed_at = now
            sla.claim_outage(s, row)  # beyond the outage SLA: a claim for the operator
            tickets.alert_cleared(s, row, now, agent_actor(node.id))
    for key, alert in raised.items():
        if key not in seen:
            opened = HardwareAlert(node_id=node.id, instance_id=node.instance_id,
                                   gpu_index=alert.gpu, gpu_uuid=alert.uuid,
                                   kind=alert.kind.value, severity=alert.severity,
                                   message=alert.message, phrase=_phrase_json(alert),
                                   opened_at=now, last_seen_at=now)
            s.add(opened)
            s.flush()  # the ticket's evidence names it
            tickets.open_from_alert(s, p, opened, now, agent_actor(node.id))
    return [a.as_dict() for a in raised.values()]


def _within_the_node(p: Platform, node: Node, summaries: Sequence[GpuSummary]) -> None:
    """A push speaks of this node's GPUs, each once: no more than its SKU has."""
    sku = p.catalog.sku_by_id.get(node.sku)
    count = sku.gpu_count if sku is not None else 16
    indices = [g.index for g in summaries]
    if len(set(indices)) != len(indices) or any(not 0 <= i < count for i in indices):
        raise InvalidInput("gpus", "{node_name} has {count} GPUs (indices 0 to {last}), "
                           "each summarized once per push; nothing was stored.",
                           node_name=node.name, count=count, last=count - 1)


def ingest(p: Platform, credential: str | None, gpus: Iterable[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """Store one push of GPU summaries for the node's current instance; returns the alerts
    the window raises."""
    with p.db.read() as s:  # who is asking, before anything of the body is read
        authenticate_agent(s, credential)
    try:
        summaries = [GpuSummary.from_dict(g) for g in gpus]
    except (TypeError, ValueError, KeyError, AttributeError):
        raise InvalidInput("gpus", "A GPU summary is not in the agent's shape; send the "
                           "agent's /v1/summary 'gpus' list as is.") from None
    now = p.clock.now()
    with p.db.write() as s:
        agent = authenticate_agent(s, credential)
        node = s.get(Node, agent.node_id)
        assert node is not None
        _within_the_node(p, node, summaries)
        agent.last_seen_at = now
        s.add_all(TelemetrySummary(node_id=node.id, instance_id=node.instance_id,
                                   received_at=now, gpu_index=g.index, gpu_uuid=g.uuid,
                                   summary_json=json.dumps(g.as_dict()))
                  for g in summaries)
        return _sync_alerts(s, p, node, summaries, now)


def _newest_summaries(s: Session, instance_id: str, gpus: int
                      ) -> dict[tuple[str, int], TelemetrySummary]:
    """The newest summary of each (node, GPU) of the instance: read backwards from the
    newest along its (instance, time) index, a few pushes deep (a node that stopped
    pushing a while ago is not looked for further back)."""
    found: dict[tuple[str, int], TelemetrySummary] = {}
    for row in s.scalars(select(TelemetrySummary)
                         .where(TelemetrySummary.instance_id == instance_id)
                         .order_by(TelemetrySummary.received_at.desc())
                         .limit(max(gpus, 1) * 4)):
        found.setdefault((row.node_id, row.gpu_index), row)
    return found


def instance_metrics(p: Platform, actor: Principal, instance_id: str) -> dict[str, Any]:
    """The latest summary of each GPU the instance holds, and its open alerts."""
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        nodes = []
        held_nodes = [(n, g) for n, g, held in instance_allocations(s, inst.id) if held]
        newest = _newest_summaries(s, inst.id, sum(len(g) for _, g in held_nodes))
        for node, gpu_indices in held_nodes:
            rows = sorted((r for (node_id, gpu), r in newest.items()
                           if node_id == node.id and gpu in gpu_indices),
                          key=lambda r: r.gpu_index)
            alerts = s.scalars(select(HardwareAlert).where(
                HardwareAlert.node_id == node.id, HardwareAlert.closed_at.is_(None),
                HardwareAlert.gpu_index.in_(gpu_indices) | (HardwareAlert.source == "bmc"))
                .order_by(HardwareAlert.id)).all()
            agent = s.get(NodeAgent, node.id)
            nodes.append({
                "node": node.name,
                "agent_last_seen_at": agent.last_seen_at if agent else None,
                "simulated": bool(agent.simulated) if agent else None,
                "received_at": max((r.received_at for r in rows), default=None),
                "gpus": [json.loads(r.summary_json) for r in rows],
                "alerts": [{"kind": a.kind, "gpu": a.gpu_index, "uuid": a.gpu_uuid,
                            "source": a.source, "severity": a.severity, "message": a.message,
                            "phrase": json.loads(a.phrase) if a.phrase else None,
                            "opened_at": a.opened_at, "last_seen_at": a.last_seen_at}
                           for a in alerts],
            })
        return {"instance_id": inst.id, "nodes": nodes}


def node_alerts(p: Platform, actor: Principal, node_id: str) -> list[dict[str, Any]]:
    """Operator: a node's open hardware alerts, oldest first."""
    actor.require_operator()
    with p.db.read() as s:
        return [{"kind": a.kind, "gpu": a.gpu_index, "source": a.source,
                 "severity": a.severity, "message": a.message,
                 "phrase": json.loads(a.phrase) if a.phrase else None, "opened_at": a.opened_at,
                 "last_seen_at": a.last_seen_at}
                for a in s.scalars(select(HardwareAlert).where(
                    HardwareAlert.node_id == node_id, HardwareAlert.closed_at.is_(None))
                    .order_by(HardwareAlert.id))]


# --- acceptance reports and erase certificates -----------------------------------------

def record_acceptance(s: Session, p: Platform, node: Node, instance_id: str | None,
                      report: Report, trigger: str, now: datetime, *, actor: str) -> str:
    """The report kept; a failed run on a rented machine (on its tenant's request) is an
    SLA claim and a P1 ticket with the report as evidence."""
    report_id = uuid.uuid4().hex
    s.add(AcceptanceReport(id=report_id, node_id=node.id, instance_id=instance_id,
                           created_at=now, trigger=trigger, passed=report.passed,
                           simulated=report.simulated,
                           report_json=json.dumps(report.as_dict())))
    if trigger == "on_demand" and not report.passed and instance_id is not None:
        sla.credit_failed_acceptance(s, instance_id, now, actor=actor, report_id=report_id,
                                     platform_evidence=node.agent_kind == "builtin",
                                     cap=p.settings.sla_credit_cap)
        tickets.open_for_failed_acceptance(s, p, node, instance_id, report_id,
                                           failure_reason(report, report_id), now, actor)
    return report_id


def failure_reason(report: Report, report_id: str) -> str:
    failed = report.failures
    shown = "; ".join(f"{c.name}{f' gpu{c.gpu}' if c.gpu is not None else ''} "
                      f"{c.value if c.value is not None else ''} {c.unit} (need {c.threshold})"
                      .replace("  ", " ") for c in failed[:4])
    more = f" and {len(failed) - 4} more" if len(failed) > 4 else ""
    return f"acceptance failed ({len(failed)} checks): {shown}{more}; report {report_id}"


def record_certificates(s: Session, node_id: str, instance_id: str | None,
                        certificates: Iterable[dict[str, Any]], now: datetime) -> list[str]:
    failed = []
    for cert in certificates:
        s.add(EraseCertificate(
            id=str(cert["id"]), node_id=node_id, instance_id=instance_id,
            device=str(cert["device"]), serial=cert.get("serial"),
            method=str(cert["method"]), nist_level=str(cert["nist_level"]),
            passed=bool(cert["passed"]), simulated=cert["method"] == "simulated",
            created_at=now, digest=str(cert.get("digest", "")),
            certificate_json=json.dumps(cert)))
        if not cert["passed"]:
            failed.append(str(cert["device"]))
    return failed


def count_acceptance_reports(p: Platform, actor: Principal, instance_id: str) -> int:
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        return s.scalar(select(func.count()).select_from(AcceptanceReport).where(
            AcceptanceReport.instance_id == inst.id)) or 0


def acceptance_reports(p: Platform, actor: Principal, instance_id: str, limit: int = 100,
                       offset: int = 0) -> list[dict[str, Any]]:
    """Oldest first, a page at a time (a report is tens of kilobytes)."""
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        rows = s.scalars(select(AcceptanceReport).where(
            AcceptanceReport.instance_id == inst.id).order_by(
                AcceptanceReport.created_at, AcceptanceReport.id).limit(limit).offset(offset))
        names = {n.id: n.name for n, _, _ in instance_allocations(s, inst.id)}
        return [{"id": r.id, "node": names.get(r.node_id, r.node_id), "created_at": r.created_at,
                 "trigger": r.trigger, "passed": r.passed, "simulated": r.simulated,
                 "report": json.loads(r.report_json)} for r in rows]


def _certificate_view(row: EraseCertificate, node_name: str) -> dict[str, Any]:
    return {"id": row.id, "node": node_name, "device": row.device, "serial": row.serial,
            "method": row.method, "nist_level": row.nist_level, "passed": row.passed,
            "simulated": row.simulated, "digest": row.digest,
            "certificate": json.loads(row.certificate_json)}


def instance_certificates(p: Platform, actor: Principal, instance_id: str,
                          limit: int = 100, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The instance's certificates, oldest first, a page at a time; and how many in all."""
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        names = {n.id: n.name for n, _, _ in instance_allocations(s, inst.id)}
        where = EraseCertificate.instance_id == inst.id
        total = s.scalar(select(func.count()).select_from(EraseCertificate).where(where)) or 0
        rows = s.scalars(select(EraseCertificate).where(where).order_by(
            EraseCertificate.created_at, EraseCertificate.device).limit(limit).offset(offset))
        return [_certificate_view(r, names.get(r.node_id, r.node_id)) for r in rows], total


def certificate(p: Platform, actor: Principal, certificate_id: str) -> dict[str, Any]:
    """One certificate: the tenant whose lease it was, or an operator."""
    with p.db.read() as s:
        row = s.get(EraseCertificate, certificate_id)
        if row is not None and not actor.is_operator:
            try:
                get_instance(s, actor, row.instance_id or "")
            except NotFound:
                row = None
        if row is None:
            raise NotFound("No erase certificate {certificate_id} for you.",
                           certificate_id=certificate_id)
        node = s.get(Node, row.node_id)
        return _certificate_view(row, node.name if node else row.node_id)


def node_certificates(p: Platform, actor: Principal, node_id: str, limit: int = 100,
                      offset: int = 0) -> list[dict[str, Any]]:
    """A node's certificates over its life, newest first, a page at a time."""
    if not actor.is_operator:
        raise Forbidden("Only an operator can list a node's certificates.")
    with p.db.read() as s:
        node = s.get(Node, node_id) or s.scalar(select(Node).where(Node.name == node_id))
        if node is None:
            raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
        rows = s.scalars(select(EraseCertificate).where(
            EraseCertificate.node_id == node.id).order_by(
                EraseCertificate.created_at.desc(), EraseCertificate.device)
            .limit(limit).offset(offset))
        return [_certificate_view(r, node.name) for r in rows]
