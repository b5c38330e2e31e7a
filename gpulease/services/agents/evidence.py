"""What node agents prove, kept as evidence: acceptance reports (at delivery, after a repair,
on a tenant's request: a failed run on a rented machine is an SLA claim and a P1 ticket)
and erase certificates, with the views tenants and operators read them through."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance, instance_allocations
from gpulease.db.tables import AcceptanceReport, EraseCertificate, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Forbidden, NotFound
from gpulease.domain.fleet.acceptance import Report
from gpulease.ports.records import Priced, Records
from gpulease.schemas import Page
from gpulease.services.money import sla
from gpulease.services.support import tickets


@dataclass(frozen=True)
class AcceptanceRun:
    """An acceptance run of a node: its report, why it ran (delivery, burn_in, on_demand),
    for which instance, and who ran it."""

    report: Report
    trigger: str
    instance_id: str | None
    actor: str


def record_acceptance(s: Session, p: Priced, node: Node, run: AcceptanceRun,
                      now: datetime) -> str:
    """The report kept; a failed run on a rented machine (on its tenant's request) is an
    SLA claim and a P1 ticket with the report as evidence."""
    report, trigger, instance_id, actor = run.report, run.trigger, run.instance_id, run.actor
    report_id = uuid.uuid4().hex
    s.add(AcceptanceReport(id=report_id, node_id=node.id, instance_id=instance_id,
                           created_at=now, trigger=trigger, passed=report.passed,
                           simulated=report.simulated,
                           report_json=json.dumps(report.as_dict())))
    if trigger == "on_demand" and not report.passed and instance_id is not None:
        sla.credit_failed_acceptance(s, instance_id, now, sla.FailedRun(
            report_id, node.agent_kind == "builtin", actor), p.settings.sla_credit_cap)
        tickets.open_for_failed_acceptance(s, p, node, tickets.FailedAcceptance(
            instance_id, report_id, failure_reason(report, report_id), actor), now)
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


def count_acceptance_reports(p: Records, actor: Principal, instance_id: str) -> int:
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        return s.scalar(select(func.count()).select_from(AcceptanceReport).where(
            AcceptanceReport.instance_id == inst.id)) or 0


def acceptance_reports(p: Records, actor: Principal, instance_id: str, limit: int = 100,
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


def instance_certificates(p: Records, actor: Principal, instance_id: str,
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


def certificate(p: Records, actor: Principal, certificate_id: str) -> dict[str, Any]:
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


def node_certificates(p: Records, actor: Principal, node_id: str, limit: int = 100,
                      offset: int = 0) -> Page[dict[str, Any]]:
    """A node's certificates over its life, newest first, a page at a time."""
    if not actor.is_operator:
        raise Forbidden("Only an operator can list a node's certificates.")
    with p.db.read() as s:
        node = s.get(Node, node_id) or s.scalar(select(Node).where(Node.name == node_id))
        if node is None:
            raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
        q = select(EraseCertificate).where(EraseCertificate.node_id == node.id)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(EraseCertificate.created_at.desc(), EraseCertificate.device)
                         .limit(limit).offset(offset))
        return Page(items=[_certificate_view(r, node.name) for r in rows], total=total,
                    limit=limit, offset=offset)
