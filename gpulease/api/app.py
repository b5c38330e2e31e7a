"""The FastAPI application: REST under /api/v1, OpenAPI at /api/v1/openapi.json."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from sqlalchemy import text

from gpulease import __version__
from gpulease.api import docs, problems
from gpulease.api.access import Caller, access
from gpulease.api.audit_trail import AuditTrail
from gpulease.api.deps import PROBLEMS, PUBLIC_PROBLEMS, PlatformDep
from gpulease.api.guards import Guards
from gpulease.api.limits import RateLimits
from gpulease.api.routers import (
    accounts,
    advisor,
    agents,
    audit,
    billing,
    catalog,
    instances,
    media,
    money,
    nodes,
)
from gpulease.platform import Platform
from gpulease.schemas import Problem
from gpulease.web import console

API = "/api/v1"


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


def create_app(platform: Platform) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if platform.audit_writer is not None:  # the rows still queued, before the exit
            await anyio.to_thread.run_sync(platform.audit_writer.close)

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
    api = APIRouter(prefix=API, responses=PROBLEMS)
    for module in (catalog, instances, nodes, accounts, agents, money, billing, advisor,
                   audit):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(media.router)
    console.install(app)
    docs.install(app)
    _document_problems(app)

    @app.get("/", include_in_schema=False, openapi_extra=access(Caller.ANYONE))
    def root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

    @app.get("/healthz", tags=["health"], responses=PUBLIC_PROBLEMS,
             openapi_extra=access(Caller.ANYONE))
    def healthz(p: PlatformDep) -> dict[str, str]:
        with p.db.read() as s:
            s.execute(text("SELECT 1"))
        return {"status": "ok", "database": p.db.dialect, "version": __version__}

    return app
