"""The API's browsable docs work without the internet: Swagger UI and ReDoc load from
files shipped with the package, in a real browser, and no request leaves the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.api.docs import VENDOR
from gpulease.compose import make_platform
from gpulease.testing.platforms import make_settings
from gpulease.testing.servers import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture
def docs_server(tmp_path: Path) -> Iterator[LiveServer]:
    if not (VENDOR / "swagger-ui" / "swagger-ui-bundle.js").exists():
        pytest.fail("the docs' browser files are missing: `make vendor` fetches them")
    p = make_platform(make_settings(f"sqlite:///{tmp_path / 'd.db'}", tmp_path))
    p.db.migrate()
    with LiveServer(p) as server:
        yield server
    p.db.dispose()


@pytest.mark.parametrize(("path", "shows"), [
    ("/api/v1/docs", ".swagger-ui .info .title"),
    ("/api/v1/redoc", "#redoc h1"),
])
def test_the_api_docs_render_from_shipped_files(
    docs_server: LiveServer, browser: object, path: str, shows: str
) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    fetched: list[str] = []  # requests that got an answer (a CSP-blocked one does not)
    page.on("requestfinished", lambda request: fetched.append(request.url))
    page.goto(f"{docs_server.url}{path}")
    page.wait_for_selector(shows, timeout=30_000)
    assert "gpulease" in page.inner_text(shows)
    elsewhere = [u for u in fetched if not u.startswith((docs_server.url, "data:", "blob:"))]
    assert elsewhere == []  # nothing from a CDN
    page.close()
