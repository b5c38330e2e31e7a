"""The FastAPI application: REST under /api/v1, OpenAPI at /api/v1/openapi.json."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse

from gpulease import __version__
from gpulease.api import docs, media, problems
from gpulease.api.access import Caller, access
from gpulease.api.audit_trail import AuditTrail
from gpulease.api.deps import PROBLEMS, PUBLIC_PROBLEMS, PlatformDep, whole_numbers_only
from gpulease.api.guards import Guards
from gpulease.api.limits import RateLimits
from gpulease.api.routers import (
    accounts,
    agents,
    audit,
    backups,
    billing,
    catalog,
    fabrics,
    instances,
    money,
    nodes,
    saved_images,
    storage,
    tenants,
    tickets,
    workers,
)
from gpulease.platform import Platform
from gpulease.schemas import Problem
from gpulease.services.catalog import versions as catalog_versions
from gpulease.services.platform import audit as audit_trail
from gpulease.web import console

API = "/api/v1"
log = logging.getLogger("gpulease.api")


def _document_problems(app: FastAPI) -> None:
    """The OpenAPI document names the problem+json shape every error answer has."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
                Problem.model_json_schema(ref_template="#/components/schemas/{model}"))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _follow_catalog(platform: Platform) -> None:
    """Every GPULEASE_CATALOG_FOLLOW_S: a newer published catalog swapped in."""
    while True:
        try:
            await anyio.to_thread.run_sync(catalog_versions.follow, platform)
        except Exception:  # the database away: the next look will tell
            log.debug("catalog follow failed", exc_info=True)
        await anyio.sleep(platform.settings.catalog_follow_s)


def create_app(platform: Platform) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threads = anyio.to_thread.current_default_thread_limiter()
        threads.total_tokens = platform.settings.api_threads
        log.info("API process %d serving on %s:%d", os.getpid(), platform.settings.host,
                 platform.settings.port, extra={"fields": {
                     "event": "listening", "pid": os.getpid(),
                     "host": platform.settings.host, "port": platform.settings.port}})
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_follow_catalog, platform)
            yield
            tasks.cancel_scope.cancel()
        queue = platform.kept.get(audit_trail.QUEUE)
        if queue is not None:  # the rows still queued, before the exit
            await anyio.to_thread.run_sync(queue.close)

    app = FastAPI(
        lifespan=lifespan,
        title="gpulease",
        version=__version__,
        description="GPU compute rental: bare-metal servers, clusters and container instances.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # served from files shipped with the package (api/docs.py)
        redoc_url=None,
    )
    app.state.platform = platform
    problems.install(app)
    app.add_middleware(AuditTrail, platform=platform)
    app.add_middleware(RateLimits, platform=platform)  # a refused request is not audited
    app.add_middleware(Guards, max_body_bytes=platform.settings.max_body_bytes)  # outermost
    api = APIRouter(prefix=API, responses=PROBLEMS, dependencies=[Depends(whole_numbers_only)])
    for module in (catalog, instances, nodes, accounts, agents, money, billing, audit,
                   workers, fabrics, tenants, tickets, storage, backups, saved_images):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(media.router)
    console.install(app)
    docs.install(app)
    _document_problems(app)

    @app.get("/", include_in_schema=False, openapi_extra=access(Caller.ANYONE))
    def root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

    @app.get("/healthz", tags=["health"], openapi_extra=access(Caller.ANYONE),
             responses={**PUBLIC_PROBLEMS, 503: {
                 "description": "the database answers but cannot take writes: `reason` says "
                                "why (a read-only or full disk, a standby)",
                 "content": {"application/json": {}}}})
    def healthz(p: PlatformDep) -> Response:
        """Alive: the database answers and can take writes (a read-only or full disk, or a
        standby, is 503 with the reason)."""
        why = p.db.unwritable()  # one round trip: it answers, and can take writes
        body = {"status": "ok" if why is None else "unwritable", "database": p.db.dialect,
                "writable": why is None}
        if why is not None:
            body["reason"] = why
        return JSONResponse(body, status_code=200 if why is None else 503)

    @app.get("/readyz", tags=["health"], openapi_extra=access(Caller.ANYONE),
             responses={**PUBLIC_PROBLEMS, 503: {
                 "description": "not ready: the answer's `checks` say why",
                 "content": {"application/json": {}}}})
    def readyz(p: PlatformDep) -> Response:
        """Whether this API process can serve: its database answers, the schema is this
        release's, and this process's secret key is still the installation's (a process
        left running across `gpulease key rotate` is taken out). 200 or 503, with each
        check. Workers are not a reason to take an API out of its balancer: how many are
        alive is said (`workers_live`) and alerted on (GpuleaseNoWorker), not checked."""
        from gpulease.services.platform import keys, workers

        checks: dict[str, Any] = {}
        live: int | None = None
        try:
            at, head = p.db.schema()
            checks["database"] = "ok"
            checks["schema"] = "ok" if at == head else f"at {at}, this release needs {head}"
            checks["key"] = ("ok" if keys.key_is_installations(p) else
                             "this process's secret key is not the installation's: restart "
                             "it with the current GPULEASE_SECRET_KEY")
            live = workers.live_count(p)
        except Exception as exc:  # the details are for the log, not for anyone asking
            log.warning("readyz: database unreachable or unusable: %s",
                        str(exc).splitlines()[0][:300])
            checks["database"] = "unreachable or unusable (this process's log says why)"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks, "workers_live": live},
                            status_code=200 if ready else 503)

    @app.get("/metrics", tags=["health"], responses=PROBLEMS,
             response_class=PlainTextResponse, openapi_extra=access(Caller.ANYONE))
    def metrics(p: PlatformDep, request: Request) -> Response:
        """The control plane's metrics in Prometheus form (`gpulease_` names). Send
        GPULEASE_METRICS_TOKEN, or an operator's API token, as a bearer token."""
        import hmac

        from gpulease.domain.errors import Unauthorized
        from gpulease.services.accounts.identity import authenticate
        from gpulease.services.platform import control_metrics

        sent = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        wanted = p.settings.metrics_token
        if not (wanted and hmac.compare_digest(sent.encode(), wanted.encode())):
            if not sent:
                raise Unauthorized("Send GPULEASE_METRICS_TOKEN (or an operator's API "
                                   "token) as a bearer token")
            authenticate(p, sent).require_operator()
        return Response(control_metrics.render(p),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
