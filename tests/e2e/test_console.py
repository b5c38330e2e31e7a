"""The web console in a real browser (Debian's chromium driven by Playwright), against a
live server with the worker running, on SQLite and PostgreSQL: sign in, order from the
catalog, watch the delivery settle, see the root password once, release, see the money."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from gpulease.demo_agents import DemoAgents
from gpulease.domain.errors import Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.instances import views as instances
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.testing.servers import LiveServer
from tests.fixtures.browser import PASSWORD, SIGN_IN

pytestmark = pytest.mark.slow


def _status_becomes(page, want: str, timeout_s: float = 40) -> None:  # type: ignore[no-untyped-def]
    """The instance page follows its server-sent events (reloading when the instance
    changes) until the instance settles."""
    deadline = time.monotonic() + timeout_s
    while page.inner_text("#status") != want:
        assert time.monotonic() < deadline, f"still {page.inner_text('#status')}"
        page.wait_for_timeout(500)


def test_a_tenant_orders_watches_and_releases_in_the_browser(
    fleet: Platform, live: LiveServer, browser: object
) -> None:
    tenant = new_tenant(fleet, name="browser-team")
    users.change_password(fleet, tenant.principal, PASSWORD, None)
    page = browser.new_page()  # type: ignore[attr-defined]

    page.goto(f"{live.url}/console/")
    assert page.url.endswith("/console/login")  # no session: sign in first
    page.fill("#email", "browser-team@example.com")
    page.fill("#password", "wrong password!")
    page.click(SIGN_IN)
    assert "Wrong e-mail or password" in page.inner_text(".error")
    page.fill("#password", PASSWORD)
    page.click(SIGN_IN)
    assert "No instances yet" in page.inner_text("main")
    cookie = next(c for c in page.context.cookies() if c["name"] == "gpulease_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    # The catalog shows live stock; a bad key is refused with the reason, nothing ordered.
    page.goto(f"{live.url}/console/catalog")
    row = page.locator("#offers tr", has_text="NVIDIA H100").filter(has_text="Ningxia").first
    assert row.locator("td.num").nth(2).inner_text() == "2"
    row.locator("a.button").click()
    page.fill("#ssh_key", "not a key")
    page.click("#order-form button[type=submit]")
    assert "ssh" in page.inner_text(".error").lower()
    assert page.input_value("#ssh_key") == "not a key"  # what was typed stays

    # The order is reviewed (its total, VAT and the hold) before anything is held.
    page.select_option("#term", "day")
    page.fill("#name", "trial-run")
    page.fill("#ssh_key", ssh_key("me@laptop"))
    page.click("#order-form button[type=submit]")
    assert "Review your order" in page.inner_text("h1")
    total = page.inner_text("#total")
    assert total.startswith("¥") and total in page.inner_text("#hold")
    assert instances.list_instances(fleet, tenant.principal).total == 0
    page.click("#confirm")
    assert re.search(r"/console/instances/i-[0-9a-f]+$", page.url)
    iid = page.url.rsplit("/", 1)[1]
    _status_becomes(page, "ready")
    assert page.inner_text("#ssh").startswith("ssh root@")
    assert "ready" in page.inner_text("#stages")

    assert "none yet" in page.inner_text("main")  # no telemetry before the agent's push
    assert "passed" in page.inner_text("#acceptance")  # the report that gated delivery
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    page.click("#reveal")
    password = page.inner_text("#root-password")
    assert len(password) >= 16
    page.click("button[data-copy=root-password]")  # copied as shown, said beside it
    assert page.evaluate("navigator.clipboard.readText()") == password
    assert page.inner_text("#root-password-copied") == "Copied"
    page.click("button[data-copy=ssh]")
    assert page.evaluate("navigator.clipboard.readText()") == page.inner_text("#ssh")
    DemoAgents(fleet).tick()  # the (simulated) node agent pushes its first summary
    page.goto(f"{live.url}/console/instances/{iid}")
    assert page.locator("#reveal").count() == 0  # shown once
    gpus = page.locator("table.telemetry tr")
    assert gpus.count() == 9  # a header and the 8 GPUs
    assert re.fullmatch(r"\d+", gpus.nth(1).locator("td").nth(1).inner_text())  # temp °C

    page.goto(f"{live.url}/console/")
    assert "trial-run" in page.inner_text("#instances")
    missing = page.goto(f"{live.url}/console/instances/i-000000000000")
    assert missing is not None and missing.status == 404
    assert "No instance i-000000000000 in your account" in page.inner_text(".error")
    page.goto(f"{live.url}/console/billing")
    assert "hold" in page.inner_text("#ledger") or "charge" in page.inner_text("#ledger")

    page.goto(f"{live.url}/console/instances/{iid}")
    assert "running the acceptance tests, 5 of 7" in page.inner_text("#stages")
    assert "ends" in page.inner_text("#lease").lower()
    page.click("#release")  # a page that says what is refunded and kept, then asks
    assert "stays paid" in page.inner_text("#release-summary")
    page.click("#confirm-release")
    _status_becomes(page, "released")
    page.reload()
    erased = page.inner_text("#certificates")
    assert "erased" in erased and "simulated" in erased  # one certificate per disk
    with page.expect_download() as got:  # and they can be kept
        page.click("#certificates-download")
    kept = json.loads(Path(got.value.path()).read_text())
    assert kept["instance_id"] == iid and kept["total"] == len(kept["certificates"]) >= 1
    assert all(c["digest"] for c in kept["certificates"])

    # A form posted from another site is refused, even with the session cookie.
    forged = httpx.post(f"{live.url}/console/instances/{iid}/release",
                        data={"confirmed": "true"},
                        cookies={"gpulease_session": cookie["value"]},
                        headers={"Origin": "https://evil.example"})
    assert forged.status_code == 401

    page.click("text=Sign out")
    assert page.url.endswith("/console/login")
    with pytest.raises(Unauthorized, match="revoked"):
        accounts.authenticate(fleet, cookie["value"])
    page.close()


def test_an_operator_sees_the_fleet(fleet: Platform, live: LiveServer, browser: object) -> None:
    _, _token = accounts.create_operator(fleet, "ops@example.com", "Ops")
    ops = accounts.authenticate(fleet, _token.token)
    users.change_password(fleet, ops, PASSWORD, None)
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(f"{live.url}/console/login")
    page.fill("#email", "OPS@example.com")  # e-mail matched without regard to case
    page.fill("#password", PASSWORD)
    page.click(SIGN_IN)
    nodes = page.inner_text("#nodes")
    assert "sim-h100-80g-x8-ningxia-1-01" in nodes and "simulated" in nodes
    # Drain a free node: it goes to maintenance at once; resume brings it back.
    page.click('button[data-node="sim-h100-80g-x8-ningxia-1-02"]')
    row = page.locator("#nodes tr", has_text="sim-h100-80g-x8-ningxia-1-02")
    assert "maintenance" in row.inner_text() and "drained from the console" in row.inner_text()
    page.click('button[data-node="sim-h100-80g-x8-ningxia-1-02"]')
    row = page.locator("#nodes tr", has_text="sim-h100-80g-x8-ningxia-1-02")
    assert "available" in row.inner_text()
    page.goto(f"{live.url}/console/catalog")
    assert page.locator("#offers a.button").count() == 0  # operators do not order
    page.close()
