"""An address under /console that does not exist answers an HTML page in the console's
look with a way back (404, 405), while the API keeps answering problem JSON."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.platform import Platform


def test_unknown_console_pages_are_pages_and_the_api_stays_json(platform: Platform) -> None:
    with TestClient(create_app(platform)) as client:
        missing = client.get("/console/no-such-page")
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("text/html")
        assert "no such page" in missing.text and "/console/" in missing.text
        wrong = client.delete("/console/login")
        assert wrong.status_code == 405 and wrong.headers["content-type"].startswith(
            "text/html")
        api = client.get("/api/v1/no-such-endpoint")
        assert api.status_code == 404
        assert api.headers["content-type"].startswith("application/problem+json")
