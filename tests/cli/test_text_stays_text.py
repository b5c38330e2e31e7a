"""Text that stays text: tenant-written text with control characters or bidirectional
overrides is refused at the API (422 naming the field); a CSV never carries a formula
(tests/services/money/test_finance.py); the operator's terminal prints stored text with its
markup shown and its escapes as codes, never interpreted."""

from __future__ import annotations

import httpx
from sqlalchemy import update
from typer.testing import CliRunner

from gpulease.cli.common import plain, safe
from gpulease.cli.main import app
from gpulease.db.tables import Tenant
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer

HOSTILE = ["\x1b]0;owned\x07", "\x1b[2J", "a\u202eb", "a\x00b", "line\r\nbreak", "a\x85b"]


def test_free_text_with_control_characters_is_refused_naming_the_field(
    platform: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    me = {"Authorization": f"Bearer {tenant.token}"}
    for bad in HOSTILE:
        ticket = httpx.post(f"{server.url}/api/v1/tickets", headers=me, json={
            "instance_id": "ins_x", "summary": f"GPU gone {bad}"})
        assert ticket.status_code == 422, bad
        assert "summary" in ticket.text and "U+" in ticket.text
        profile = httpx.put(f"{server.url}/api/v1/billing-profile", headers=me,
                            json={"title": f"ACME {bad}"})
        assert profile.status_code == 422 and "title" in profile.text
        token = httpx.post(f"{server.url}/api/v1/tokens", headers=me,
                           json={"name": f"ci {bad}", "expires_in_days": 1})
        assert token.status_code == 422 and "name" in token.text
    # a comment may hold lines: a browser's CR LF is a newline, a tab is a tab
    ok = httpx.post(f"{server.url}/api/v1/tokens", headers=me,
                    json={"name": "[bold red]brackets are text[/bold red]",
                          "expires_in_days": 1})
    assert ok.status_code == 201


def test_the_terminal_shows_stored_text_as_text(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    hostile = "[bold red]Evil[/bold red][link=http://x.example]pay[/link]\x1b]0;t\x07\u202eZ"
    with platform.db.write() as s:  # stored by an older release, or on SQLite with a NUL
        s.execute(update(Tenant).where(Tenant.id == tenant.tenant_id).values(
            name=hostile, status_reason="\x1b[2J cleared"))
    shown = CliRunner().invoke(app, ["tenants"], env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token, "COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert "[bold red]Evil[/bold red]" in shown.output  # markup shown, not applied
    assert "\x1b" not in shown.output and "\u202e" not in shown.output
    assert "\\x1b]0;t\\x07\\u202eZ" in shown.output and "\\x1b[2J cleared" in shown.output
    assert safe("[red]x\x1b") == "\\[red]x\\x1b" and plain("[b]\x07").plain == "[b]\\x07"
