"""GPU telemetry pushed by node agents: each push checked against the node (its GPUs, each
once, within its node's daily byte budget) and stored as per-minute summaries for the
node's current instance; the alerts the window raises opened, refreshed or closed
(services/fleet/alerts.py); the newest summaries and open alerts of an instance, and a
node's alerts for operators."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance, instance_allocations, lock_node
from gpulease.db.tables import HardwareAlert, Node, NodeAgent, TelemetrySummary
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput, TooManyRequests
from gpulease.domain.fleet.telemetry import GpuSummary
from gpulease.ports.records import Priced, Records
from gpulease.services.agents.credentials import authenticate_agent
from gpulease.services.fleet.alerts import sync_agent_alerts
from gpulease.services.telemetry.bounds import OutOfBounds, bounded


def window_s(g: GpuSummary) -> float:
    """The seconds a window covers, as the idle view weighs it: at most an hour, whatever
    the agent's clock says."""
    return min(max(g.end - g.start, 0.0), 3600.0)


def _within_the_node(p: Priced, node: Node, summaries: Sequence[GpuSummary]) -> None:
    """A push speaks of this node's GPUs, each once: no more than its SKU has."""
    sku = p.catalog.sku_by_id.get(node.sku)
    count = sku.gpu_count if sku is not None else 16
    indices = [g.index for g in summaries]
    if len(set(indices)) != len(indices) or any(not 0 <= i < count for i in indices):
        raise InvalidInput("gpus", "{node_name} has {count} GPUs (indices 0 to {last}), "
                           "each summarized once per push; nothing was stored.",
                           node_name=node.name, count=count, last=count - 1)


def ingest(p: Priced, credential: str | None, gpus: Iterable[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """Store one push of GPU summaries for the node's current instance; returns the alerts
    the window raises."""
    with p.db.read() as s:  # who is asking, before anything of the body is read
        authenticate_agent(s, credential)
    try:
        summaries = [GpuSummary.from_dict(bounded(g)) for g in gpus]
    except OutOfBounds as exc:
        raise InvalidInput("gpus", "A GPU summary's {field} is out of bounds ({why}); send "
                           "the agent's /v1/summary 'gpus' list as is. Nothing was stored.",
                           field=exc.where, why=exc.why) from None
    except (TypeError, ValueError, KeyError, AttributeError):
        raise InvalidInput("gpus", "A GPU summary is not in the agent's shape; send the "
                           "agent's /v1/summary 'gpus' list as is.") from None
    now = p.clock.now()
    stored = [json.dumps(g.as_dict()) for g in summaries]
    with p.db.write() as s:
        agent = authenticate_agent(s, credential)
        node = _locked_node(s, agent.node_id)
        _within_the_node(p, node, summaries)
        agent.last_seen_at = now
        if not _within_the_budget(p, agent, sum(len(j) for j in stored), now):
            refused = node.name  # counted: the refusal is written, the push is not
        else:
            s.add_all(TelemetrySummary(node_id=node.id, instance_id=node.instance_id,
                                       received_at=now, gpu_index=g.index, gpu_uuid=g.uuid,
                                       summary_json=j, util_avg_pct=g.util_avg_pct,
                                       window_s=window_s(g))
                      for g, j in zip(summaries, stored, strict=True))
            return sync_agent_alerts(s, p, node, summaries, now)
    tomorrow = datetime.combine(now.date() + timedelta(days=1), time(), tzinfo=UTC)
    raise TooManyRequests(
        "{node_name}'s agent stored its day's telemetry budget ({budget} bytes; "
        "GPULEASE_AGENT_PUSH_BYTES_PER_DAY): pushes are refused until 00:00 UTC. Push less "
        "often (the agent's --push-interval) or ask the operator to raise it.",
        retry_after_s=max(1, int((tomorrow - now).total_seconds())), node_name=refused,
        budget=p.settings.agent_push_bytes_per_day)


def _within_the_budget(p: Records, agent: NodeAgent, size: int, now: datetime) -> bool:
    """Whether the agent's push of `size` bytes fits its node's budget for the day (UTC):
    counted if it does, its refusal counted if it does not."""
    day = now.date().isoformat()
    if agent.pushed_day != day:
        agent.pushed_day, agent.pushed_bytes = day, 0
    if (agent.pushed_bytes or 0) + size > p.settings.agent_push_bytes_per_day:
        agent.pushes_refused = (agent.pushes_refused or 0) + 1
        return False
    agent.pushed_bytes = (agent.pushed_bytes or 0) + size
    return True


def _locked_node(s: Session, node_id: str) -> Node:
    """The pushing node, locked in the platform's one order (its instance, then the node)
    before anything of the push is written: a swap or a release that holds the instance
    and the node and then ends this agent's credential waits for the push, or the push for
    it, never each for the other (the agent's row, the node's and its tickets' were taken
    in the other order)."""
    node = lock_node(s, node_id)
    assert node is not None
    return node


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


def instance_metrics(p: Records, actor: Principal, instance_id: str) -> dict[str, Any]:
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


def node_alerts(p: Records, actor: Principal, node_id: str) -> list[dict[str, Any]]:
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
