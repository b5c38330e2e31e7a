"""The control plane's own metrics, read from the database at each scrape (so every API
process answers the same, whichever one Prometheus reaches): nodes and instances by status
and stage, the oldest row in each stage beside the stage timeout, deliveries against the
SLA, the workers alive and their claims, the work queued, node errors of the last ten
minutes. Names under `gpulease_`; gpulease/data/monitoring/control-plane-alerts.rules.yml
alerts on them."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from gpulease import __version__
from gpulease.db.ops_tables import Repair, Ticket
from gpulease.db.tables import (
    CatalogVersion,
    CircuitBreaker,
    Event,
    Instance,
    Node,
    NodeAgent,
    WorkerProcess,
)
from gpulease.domain.states import InstanceStatus, NodeStatus, TicketStatus
from gpulease.ports.records import Keeping
from gpulease.process_metrics import REGISTRY as PROCESS
from gpulease.services.fleet.deploy_breaker import DEPLOY as DEPLOY_BREAKER
from gpulease.services.fleet.deploy_breaker import HELD
from gpulease.services.platform import sites
from gpulease.services.platform.workers import live_after

DELIVERY_BUCKETS = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0)
ACTIVE_INSTANCE = ("pending", "deploying", "releasing")
ACTIVE_NODE = ("deploying", "cleaning")
# A dead worker's series leave /metrics this long after its last heartbeat: its alert
# (GpuleaseWorkerSilent) fires for that long, then GpuleaseNoWorker speaks for the fleet.
DEAD_WORKER_SHOWN_S = 15 * 60.0


class ControlPlane(Collector):
    def __init__(self, p: Keeping) -> None:
        self.p = p

    def collect(self) -> Iterator[Any]:
        p, now = self.p, self.p.clock.now()
        with p.db.read() as s:
            nodes = s.execute(select(Node.status, Node.stage, Node.region, func.count())
                              .group_by(Node.status, Node.stage, Node.region)).all()
            insts = s.execute(select(Instance.status, Instance.stage, func.count())
                              .group_by(Instance.status, Instance.stage)).all()
            node_oldest = s.execute(select(Node.stage, func.min(Node.stage_started_at))
                                    .where(Node.status.in_(ACTIVE_NODE))
                                    .group_by(Node.stage)).all()
            inst_oldest = s.execute(select(Instance.stage, func.min(Instance.stage_started_at))
                                    .where(Instance.status.in_(ACTIVE_INSTANCE))
                                    .group_by(Instance.stage)).all()
            waiting = s.scalar(select(func.min(Instance.ordered_at)).where(
                Instance.status.in_((InstanceStatus.PENDING.value,
                                     InstanceStatus.DEPLOYING.value))))
            delivered = s.execute(select(Instance.ordered_at, Instance.ready_at)
                                  .where(Instance.ready_at.is_not(None))).all()
            due_nodes = s.scalar(select(func.count()).select_from(Node).where(
                Node.status.in_(ACTIVE_NODE), Node.next_attempt_at <= now)) or 0
            due_insts = s.scalar(select(func.count()).select_from(Instance).where(
                Instance.next_attempt_at <= now)) or 0
            workers = s.execute(select(WorkerProcess.owner, WorkerProcess.seen_at,
                                       WorkerProcess.claims)
                                .where(WorkerProcess.stopped_at.is_(None))).all()
            errors = s.scalar(select(func.count()).select_from(Event).where(
                Event.resource == "node", Event.kind == "error",
                Event.at >= now - timedelta(minutes=10))) or 0
            catalog = s.scalar(select(func.max(CatalogVersion.id))) or 0
            breaker = s.scalar(select(CircuitBreaker.status).where(
                CircuitBreaker.id == DEPLOY_BREAKER))
            tickets = s.execute(select(Ticket.severity, Ticket.status, func.count())
                                .where(Ticket.status != TicketStatus.RESOLVED.value)
                                .group_by(Ticket.severity, Ticket.status)).all()
            breached = {
                clock: s.scalar(select(func.count()).select_from(Ticket).where(
                    Ticket.status.in_(statuses), due < now)) or 0
                for clock, due, statuses in (
                    ("response", Ticket.response_due, ("open",)),
                    ("mitigation", Ticket.mitigation_due, ("open", "acknowledged")),
                    ("resolution", Ticket.resolution_due,
                     ("open", "acknowledged", "mitigated")))}
            repairs = s.execute(select(Repair.offer, Repair.started_at, Repair.finished_at)
                                .where(Repair.finished_at >= now - timedelta(days=90))).all()
            repairs_open = s.scalar(select(func.count()).select_from(Repair).where(
                Repair.finished_at.is_(None))) or 0
            held = s.scalar(select(func.count()).select_from(Node).where(
                Node.status == NodeStatus.DEPLOYING.value, Node.last_error.startswith(HELD))) or 0
            over_budget = s.execute(select(Node.name, NodeAgent.pushes_refused)
                                    .join(Node, Node.id == NodeAgent.node_id)
                                    .where(NodeAgent.pushes_refused > 0)).all()

        info = GaugeMetricFamily("gpulease_build_info", "The control plane's version.",
                                 labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield GaugeMetricFamily("gpulease_deploy_breaker_open", "1 while the deploy circuit "
                                "breaker is open (deploys failing the same way are held).",
                                value=1.0 if breaker == "open" else 0.0)
        yield GaugeMetricFamily("gpulease_deploys_held", "Deploys held by the open breaker "
                                "for a retry instead of going to maintenance.", value=held)
        g = GaugeMetricFamily("gpulease_tickets_open", "Tickets not resolved, by severity and "
                              "status.", labels=["severity", "status"])
        for severity, status, n in tickets:
            g.add_metric([severity, status], n)
        yield g
        g = GaugeMetricFamily("gpulease_tickets_breached", "Unresolved tickets past a clock's "
                              "deadline without its milestone.", labels=["clock"])
        for clock, n in breached.items():
            g.add_metric([clock], n)
        yield g
        yield GaugeMetricFamily("gpulease_repairs_open", "Nodes in repair now.",
                                value=repairs_open)
        c = CounterMetricFamily("gpulease_agent_pushes_refused", "Telemetry pushes refused "
                                "for going past the node's daily byte budget (nodes with "
                                "any).", labels=["node"])
        for name, refused in over_budget:
            c.add_metric([name], refused)
        yield c
        per_offer: dict[str, list[float]] = {}
        for offer, started, finished in repairs:
            if finished is not None:
                per_offer.setdefault(offer, []).append((finished - started).total_seconds())
        summary = SummaryMetricFamily("gpulease_repair_seconds", "Time to repair of the "
                                      "repairs finished in the last 90 days, per offer.",
                                      labels=["offer"])
        for offer, seconds in sorted(per_offer.items()):
            summary.add_metric([offer], count_value=len(seconds), sum_value=sum(seconds))
        yield summary
        yield GaugeMetricFamily("gpulease_catalog_version", "The published catalog version "
                                "in force (0: none published).", value=catalog)
        g = GaugeMetricFamily("gpulease_nodes", "Nodes by status, stage and region.",
                              labels=["status", "stage", "region"])
        for status, stage, region, n in nodes:
            g.add_metric([status, stage or "", region], n)
        yield g
        g = GaugeMetricFamily("gpulease_instances", "Instances by status and stage.",
                              labels=["status", "stage"])
        for status, stage, n in insts:
            g.add_metric([status, stage or "", ], n)
        yield g
        g = GaugeMetricFamily("gpulease_stage_oldest_seconds", "Age of the oldest row in "
                              "each stage of a pipeline.", labels=["resource", "stage"])
        for resource, rows in (("node", node_oldest), ("instance", inst_oldest)):
            for stage, since in rows:
                if since is not None:
                    g.add_metric([resource, stage or ""], (now - since).total_seconds())
        yield g
        yield GaugeMetricFamily("gpulease_stage_timeout_seconds", "A stage's deadline.",
                                value=p.settings.stage_timeout_s)
        yield GaugeMetricFamily("gpulease_delivery_sla_seconds", "The delivery SLA.",
                                value=p.settings.delivery_sla_s)
        yield GaugeMetricFamily(
            "gpulease_delivery_oldest_waiting_seconds", "Age of the oldest order not "
            "delivered yet (0 when none waits).",
            value=(now - waiting).total_seconds() if waiting else 0.0)
        seconds = sorted((ready - ordered).total_seconds() for ordered, ready in delivered
                         if ready is not None)
        buckets, i = [], 0
        for bound in DELIVERY_BUCKETS:
            while i < len(seconds) and seconds[i] <= bound:
                i += 1
            buckets.append((str(bound), i))
        buckets.append(("+Inf", len(seconds)))
        yield HistogramMetricFamily("gpulease_delivery_seconds", "Order to ready, every "
                                    "delivered instance.", buckets=buckets,
                                    sum_value=sum(seconds))
        g = GaugeMetricFamily("gpulease_queue_depth", "Rows due for the worker now.",
                              labels=["resource"])
        g.add_metric(["node"], due_nodes)
        g.add_metric(["instance"], due_insts)
        yield g
        alive_after = live_after(p, now)
        yield GaugeMetricFamily("gpulease_workers_live", "Workers seen within three "
                                "heartbeats.", value=sum(1 for w in workers
                                                          if w.seen_at > alive_after))
        g = GaugeMetricFamily("gpulease_site_live_workers", "Live workers serving each site "
                              "(its own, or for a site that never had one, the workers "
                              "without a site).", labels=["site"])
        for site, count in sites.live_by_site(p).items():
            g.add_metric([site], count)
        yield g
        g = GaugeMetricFamily("gpulease_worker_last_seen_seconds", "Since each running "
                              "worker's last heartbeat (a worker silent for over "
                              f"{DEAD_WORKER_SHOWN_S // 60:.0f} minutes is no longer shown).",
                              labels=["worker"])
        c = CounterMetricFamily("gpulease_worker_claims", "Rows each worker claimed.",
                                labels=["worker"])
        for w in workers:
            if (now - w.seen_at).total_seconds() > DEAD_WORKER_SHOWN_S:
                continue  # long dead (SIGKILLed, host lost): `gpulease workers` keeps it
            g.add_metric([w.owner], (now - w.seen_at).total_seconds())
            c.add_metric([w.owner], w.claims)
        yield g
        yield c
        yield GaugeMetricFamily("gpulease_node_errors_10m", "Node errors (BMC and agent "
                                "calls, stage failures) in the last ten minutes.",
                                value=errors)


class ThisProcess(Collector):
    """What this process counted itself (gpulease/process_metrics.py)."""

    def collect(self) -> Iterator[Any]:
        yield from PROCESS.collect()


def registry(p: Keeping) -> CollectorRegistry:
    found = CollectorRegistry(auto_describe=False)
    found.register(ControlPlane(p))
    found.register(ThisProcess())
    return found


def render(p: Keeping) -> bytes:
    return generate_latest(registry(p))


def serve_worker_metrics(p: Keeping) -> Callable[[], None] | None:
    """The worker's /metrics on GPULEASE_WORKER_METRICS_HOST:PORT (the database's view and
    this worker's own counters), behind GPULEASE_METRICS_TOKEN when one is set. Returns
    what stops it; None when no port is set."""
    port = p.settings.worker_metrics_port
    if not port:
        return None
    app = make_wsgi_app(registry(p))
    token = p.settings.metrics_token.encode()

    def guarded(environ: dict[str, Any], start: Any) -> Iterable[bytes]:
        sent = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip().encode()
        if token and not hmac.compare_digest(sent, token):
            start("401 Unauthorized", [("Content-Type", "text/plain")])
            return [b"send GPULEASE_METRICS_TOKEN as a bearer token\n"]
        return app(environ, start)  # type: ignore[no-any-return]

    server = make_server(p.settings.worker_metrics_host, port, guarded,
                         handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="gpulease-worker-metrics",
                     daemon=True).start()
    return server.shutdown


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass
