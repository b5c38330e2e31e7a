"""What one process counts in its own memory (the control plane's other metrics are read
from the database at each scrape): BMC calls that failed, by driver and kind, and the
worker's periodic jobs (runs, errors, seconds), the audit writer's queue (depth, oldest
row's age, rows reduced or lost), the HTTP requests it answered (by route template, method
and status, with a latency histogram), its database pool, and the process itself (CPU,
memory, open files: prometheus-client's process and platform collectors). Served with the
rest on /metrics: the API's, and the worker's own when GPULEASE_WORKER_METRICS_PORT is
set."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, _resident_memory_bytes,
PlatformCollector(registry=REGISTRY)  # _open_fds, _max_fds; python_info

REQUESTS = Counter("gpulease_http_requests", "HTTP requests answered by this process, by "
                   "route template, method and status.", ["route", "method", "status"],
                   registry=REGISTRY)
REQUEST_SECONDS = Histogram(
    "gpulease_http_request_seconds", "How long this process took to answer, by route "
    "template and method.", ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY)
DB_POOL_IN_USE = Gauge("gpulease_db_pool_connections_in_use",
                       "Database connections this process has checked out.",
                       registry=REGISTRY)
DB_POOL_SIZE = Gauge("gpulease_db_pool_size", "Connections this process's pool keeps open.",
                     registry=REGISTRY)


def request_answered(method: str, route: str, status: int, seconds: float) -> None:
    """One answered request (`route` the template, never the path: ids would make a series
    each)."""
    REQUESTS.labels(route, method, str(status)).inc()
    REQUEST_SECONDS.labels(route, method).observe(seconds)


def watch_pool(in_use: Callable[[], float], size: Callable[[], float]) -> None:
    """Read the database pool's figures at each scrape."""
    DB_POOL_IN_USE.set_function(in_use)
    DB_POOL_SIZE.set_function(size)

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


BMC_WAITS = Counter(
    "gpulease_bmc_retry_after_waits", "BMC answers (503, 429) that said when to come back "
    "(Retry-After): the call is tried again no sooner.", ["driver"], registry=REGISTRY)
BMC_WAIT_SECONDS = Counter(
    "gpulease_bmc_retry_after_seconds", "The waits those answers asked for, summed (capped "
    "per answer).", ["driver"], registry=REGISTRY)


def bmc_error(driver: str, kind: str) -> None:
    BMC_ERRORS.labels(driver, kind).inc()


def bmc_wait(driver: str, seconds: float) -> None:
    BMC_WAITS.labels(driver).inc()
    BMC_WAIT_SECONDS.labels(driver).inc(seconds)


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
