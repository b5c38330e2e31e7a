"""What one process counts in its own memory (the control plane's other metrics are read
from the database at each scrape): BMC calls that failed, by driver and kind, and the
worker's periodic jobs (runs, errors, seconds), the audit writer's queue (depth, oldest
row's age, rows reduced or lost). Served with the rest on /metrics: the API's,
and the worker's own when GPULEASE_WORKER_METRICS_PORT is set."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

BMC_ERRORS = Counter(
    "gpulease_bmc_call_errors", "BMC calls that failed, by driver and kind (timeout, "
    "connection, auth, not_found, server_error, refused, not_redfish, unsupported, other).",
    ["driver", "kind"], registry=REGISTRY)
PERIODIC_RUNS = Counter("gpulease_periodic_runs", "Periodic job runs in this process.",
                        ["job"], registry=REGISTRY)
PERIODIC_ERRORS = Counter("gpulease_periodic_errors", "Periodic job runs that raised.",
                          ["job"], registry=REGISTRY)
PERIODIC_SECONDS = Histogram(
    "gpulease_periodic_seconds", "How long each periodic job ran.", ["job"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0), registry=REGISTRY)


def bmc_error(driver: str, kind: str) -> None:
    BMC_ERRORS.labels(driver, kind).inc()


AUDIT_QUEUE_DEPTH = Gauge("gpulease_audit_queue_depth",
                          "Audit rows handed to this process's writer and not yet written.",
                          registry=REGISTRY)
AUDIT_QUEUE_AGE = Gauge("gpulease_audit_queue_oldest_seconds",
                        "How long the oldest unwritten audit row has waited (s).",
                        registry=REGISTRY)
AUDIT_ROWS_REDUCED = Counter(
    "gpulease_audit_rows_reduced", "Audit rows the database refused as they were, written "
    "in a reduced form that says so.", registry=REGISTRY)
AUDIT_ROWS_LOST = Counter(
    "gpulease_audit_rows_lost", "Audit rows not written: unwritten when the process stopped, "
    "or refused even reduced.", registry=REGISTRY)


def watch_audit_queue(depth_and_age: Callable[[], tuple[int, float]]) -> None:
    """Read the audit queue's depth and oldest age from `depth_and_age` at each scrape."""
    AUDIT_QUEUE_DEPTH.set_function(lambda: float(depth_and_age()[0]))
    AUDIT_QUEUE_AGE.set_function(lambda: depth_and_age()[1])
