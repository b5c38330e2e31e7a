"""What one process counts in its own memory (the control plane's other metrics are read
from the database at each scrape): BMC calls that failed, by driver and kind, and the
worker's periodic jobs (runs, errors, seconds). Served with the rest on /metrics: the API's,
and the worker's own when GPULEASE_WORKER_METRICS_PORT is set."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

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
