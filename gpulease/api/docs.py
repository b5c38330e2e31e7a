"""The API's browsable docs, Swagger UI at /api/v1/docs and ReDoc at /api/v1/redoc, from
files shipped with the package (fetched from the npm registry at build time: `make
vendor`), so they work without the internet. Where the files are missing the page says
how to get them."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from gpulease.api.access import Caller, access

WEB = Path(__file__).resolve().parent.parent / "web"
VENDOR = WEB / "vendor"
ASSETS = "/api/v1/docs/vendor"
SCRIPTS = "/api/v1/docs/static"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpulease API: {title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">{head}</head>
<body>{body}</body></html>"""
_MISSING = """<p>The {what} files are not installed with this copy of gpulease. Run
<code>make vendor</code> (it fetches them from the npm registry), or read the API
description at <a href="/api/v1/openapi.json">/api/v1/openapi.json</a>.</p>"""


def _page(title: str, needs: Path, head: str, body: str, what: str) -> HTMLResponse:
    if not needs.exists():
        return HTMLResponse(_PAGE.format(title=title, head="", body=_MISSING.format(what=what)),
                            status_code=503)
    return HTMLResponse(_PAGE.format(title=title, head=head, body=body))


def install(app: FastAPI) -> None:
    app.mount(ASSETS, StaticFiles(directory=VENDOR, check_dir=False), name="docs-vendor")
    app.mount(SCRIPTS, StaticFiles(directory=WEB / "docs"), name="docs-static")

    @app.get("/api/v1/docs", include_in_schema=False, openapi_extra=access(Caller.ANYONE))
    def swagger_ui() -> HTMLResponse:
        return _page(
            "Swagger UI", VENDOR / "swagger-ui" / "swagger-ui-bundle.js",
            f'<link rel="stylesheet" href="{ASSETS}/swagger-ui/swagger-ui.css">',
            f'<div id="swagger-ui"></div>'
            f'<script src="{ASSETS}/swagger-ui/swagger-ui-bundle.js"></script>'
            f'<script src="{SCRIPTS}/swagger-init.js"></script>', "Swagger UI")

    @app.get("/api/v1/redoc", include_in_schema=False, openapi_extra=access(Caller.ANYONE))
    def redoc() -> HTMLResponse:
        return _page(
            "ReDoc", VENDOR / "redoc" / "redoc.standalone.js", "",
            f'<div id="redoc"></div><script src="{ASSETS}/redoc/redoc.standalone.js"></script>'
            f'<script src="{SCRIPTS}/redoc-init.js"></script>', "ReDoc")
