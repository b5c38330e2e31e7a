"""Starting the platform: `up` (API + worker + demo fleet), `serve` (API), `worker`."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import uvicorn

from gpulease.api.app import create_app
from gpulease.demo import ensure_demo_tokens, seed_demo_fleet
from gpulease.platform import Platform
from gpulease.settings import Settings
from gpulease.worker.runner import Worker

log = logging.getLogger("gpulease")


def prepare(settings: Settings) -> Platform:
    platform = Platform.from_settings(settings)
    platform.db.migrate()
    return platform


def up(settings: Settings, say: callable = print) -> None:  # type: ignore[valid-type]
    """The embedded default: SQLite in the data dir, a built-in worker, a demo fleet."""
    platform = prepare(settings)
    added = seed_demo_fleet(platform, settings.demo_nodes_per_offer)
    op_token, tenant_token = ensure_demo_tokens(platform, settings.data_dir)
    worker = Worker(platform)
    worker.start()
    url = f"http://{settings.host}:{settings.port}"
    say(f"gpulease listening on {url}  (API {url}/api/v1, docs {url}/api/v1/docs)")
    say(f"database: {platform.db.dialect} ({_safe_url(platform.db.url)})")
    say(f"demo fleet: {added or 'existing'} simulated nodes, {settings.demo_delay_s:g} s per stage"
        " (SIMULATED hardware)")
    say(f"operator token:    {op_token}")
    say(f"demo tenant token: {tenant_token}")
    say(f"try:  export GPULEASE_URL={url} GPULEASE_TOKEN=$(cat {tenant_token.resolve()})")
    say("      gpulease catalog")
    try:
        _serve(platform, settings)
    finally:
        worker.stop()
        platform.db.dispose()


def serve(settings: Settings) -> None:
    platform = prepare(settings)
    try:
        _serve(platform, settings)
    finally:
        platform.db.dispose()


def run_worker(settings: Settings, threads: int | None = None) -> None:
    platform = prepare(settings)
    worker = Worker(platform)
    worker.start(threads)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    log.info("worker %s running", worker.owner)
    stop.wait()
    worker.stop()
    platform.db.dispose()


def _serve(platform: Platform, settings: Settings) -> None:
    config = uvicorn.Config(create_app(platform), host=settings.host, port=settings.port,
                            log_level="warning", access_log=False)
    uvicorn.Server(config).run()


def _safe_url(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return str(Path(url.split(":///", 1)[-1])) if url.startswith("sqlite") else url
