"""Every console page a tenant and an operator reach, in Chromium, in English and Chinese,
on SQLite and PostgreSQL: axe-core (shipped from npm) finds no serious or critical
violation, nothing is wider than the viewport at 1366×768 nor at 390×844, the page says
its language, and a screenshot of each is kept (GPULEASE_SCREENSHOTS, else the test's
temporary directory)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from gpulease.demo_agents import DemoAgents
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.tickets import TicketOpen
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.services.support import tickets
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.testing.servers import LiveServer
from gpulease.web.pages import HERE
from tests.fixtures.browser import PASSWORD, SIGN_IN

pytestmark = pytest.mark.slow
AXE = HERE / "vendor" / "axe-core" / "axe.min.js"
VIEWPORTS = {"desktop": (1366, 768), "phone": (390, 844)}
SERIOUS = {"serious", "critical"}


def _check(page: Any, name: str, shots: Path, lang: str) -> list[str]:
    """Each viewport: nothing wider than it, a screenshot; then axe on the page."""
    problems = []
    expected = lang.replace("_", "-")
    if page.get_attribute("html", "lang") != expected:
        problems.append(f"{name}: html lang is {page.get_attribute('html', 'lang')}")
    for size, (width, height) in VIEWPORTS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(50)
        wide = page.evaluate("document.documentElement.scrollWidth")
        if wide > width:
            culprit = page.evaluate("""(w) => [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > w + 1)
                .map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className).slice(0, 3)""",
                                    width)
            problems.append(f"{name} at {size}: {wide}px wide in {width}px: {culprit}")
        page.screenshot(path=str(shots / f"{lang}-{name}-{size}.png"), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => {
        const r = await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'best-practice']});
        return r.violations.map(v => ({id: v.id, impact: v.impact,
            nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
    }""")
    problems += [f"{name}: axe {v['id']} ({v['impact']}) at {v['nodes']}"
                 for v in found if v["impact"] in SERIOUS]
    return problems


# What the journey reads on the pages, in each language.
WORDS = {"en": {"ready": "ready", "released": "released", "kept": "stays paid",
                "sold out": "No free h100-80g-x8 node in ningxia-1 (0 free)"},
         "zh_CN": {"ready": "就绪", "released": "已释放", "kept": "不退还",
                   "sold out": "ningxia-1 没有空闲的 h100-80g-x8 节点（空闲 0 台）"}}


def _ready(p: Platform, principal: Any, iid: str, timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while instances.show_instance(p, principal, iid).status != "ready":
        assert time.monotonic() < deadline, "not delivered"
        time.sleep(0.2)


# Each language once and each database once: a page's words and layout follow the language,
# its data the database, and each run walks every page (about 50 s in a browser).
@pytest.mark.parametrize(("db_url", "lang"), [("sqlite", "zh_CN"), ("postgresql", "en")],
                         indirect=["db_url"])
def test_every_page_is_accessible_fits_and_speaks_the_language(
        fleet: Platform, live: LiveServer, browser: Any, lang: str,
        tmp_path: Path) -> None:
    assert AXE.exists(), "axe-core is missing: `make vendor` fetches it from npm"
    shots = Path(os.environ.get("GPULEASE_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    tenant = new_tenant(fleet, name=f"quality-{lang.lower()}")
    users.change_password(fleet, tenant.principal, PASSWORD, None)
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()], name="trial"))[0].id
    _ready(fleet, tenant.principal, iid)
    DemoAgents(fleet).tick()
    node = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    ticket = tickets.open_by_tenant(fleet, tenant.principal, TicketOpen(
        instance_id=iid, summary="GPU 3 is slow", severity="P2", gpu=3)).id

    context = browser.new_context(locale="zh-CN" if lang == "zh_CN" else "en-US",
                                  bypass_csp=True)  # to inject axe; the page keeps its CSP
    page = context.new_page()
    problems: list[str] = []
    page.goto(f"{live.url}/console/login")
    problems += _check(page, "login", shots, lang)
    page.goto(f"{live.url}/console/forgot")
    problems += _check(page, "forgot", shots, lang)
    page.goto(f"{live.url}/console/login")
    page.fill("#email", f"quality-{lang.lower()}@example.com")
    page.fill("#password", PASSWORD)
    page.click(SIGN_IN)
    for name, path in (("home", "/console/"), ("catalog", "/console/catalog"),
                       ("order", "/console/order?sku=h100-80g-x8&region=ningxia-1"),
                       ("instance", f"/console/instances/{iid}"),
                       ("release", f"/console/instances/{iid}/release"),
                       ("billing", "/console/billing"), ("missing", "/console/nope"),
                       ("advise", "/console/advise?params=70B&workload=lora&hours=48"),
                       ("account", "/console/account"), ("tickets", "/console/tickets"),
                       ("ticket", f"/console/tickets/{ticket}"), ("storage", "/console/storage"),
                       ("audit", "/console/audit")):
        page.goto(f"{live.url}{path}")
        if name == "instance":  # the charts drawn from the day's data
            page.wait_for_selector("#charts:not([hidden]) canvas", timeout=10_000)
        problems += _check(page, name, shots, lang)
    page.goto(f"{live.url}/console/order?sku=h100-80g-x8&region=ningxia-1")
    page.fill("#ssh_key", ssh_key())
    page.click("#order-form button[type=submit]")
    problems += _check(page, "review", shots, lang)
    page.click("#confirm")  # the journey on in this language: the order is placed
    page.wait_for_url(re.compile(r".*/console/instances/i-[0-9a-f]+$"))
    second = page.url.rsplit("/", 1)[1]
    # the delivery page follows the instance and reloads itself until it settles: wait
    # for that (no data-follow left) before leaving it
    page.wait_for_function("!document.querySelector('[data-follow]')", timeout=40_000)
    assert instances.show_instance(fleet, tenant.principal, second).status == "ready"
    assert page.inner_text("#status") == WORDS[lang]["ready"]
    # the offer is sold out now (two servers, both rented): the refusal, with the stock of
    # the other offers, in this language
    page.goto(f"{live.url}/console/order?sku=h100-80g-x8&region=ningxia-1")
    page.fill("#ssh_key", ssh_key())
    page.click("#order-form button[type=submit]")
    page.click("#confirm")
    assert WORDS[lang]["sold out"] in page.inner_text(".error")
    # and, in Chinese (tests/e2e/test_console.py releases in English), the second instance
    # released through its page: the terms, then released
    if lang == "zh_CN":
        page.goto(f"{live.url}/console/instances/{second}")
        page.click("#release")
        assert WORDS[lang]["kept"] in page.inner_text("#release-summary")
        page.click("#confirm-release")
        page.wait_for_url(f"**/console/instances/{second}")
        # the page follows the release and reloads itself until it settles: wait for that
        page.wait_for_function("!document.querySelector('[data-follow]')", timeout=40_000)
        assert page.inner_text("#status") == WORDS[lang]["released"]
    page.goto(f"{live.url}/console/instances/{iid}")
    assert page.url.endswith(f"/console/instances/{iid}")
    page.click("#renew")
    problems += _check(page, "renewal", shots, lang)
    page.click("#confirm-renew")  # and the renewal charged
    page.wait_for_url(f"**/console/instances/{iid}")
    context.close()

    _, token = accounts.create_operator(fleet, f"ops-{lang.lower()}@example.com", "Ops")
    users.change_password(fleet, accounts.authenticate(fleet, token.token), PASSWORD, None)
    context = browser.new_context(locale="zh-CN" if lang == "zh_CN" else "en-US",
                                  bypass_csp=True)  # to inject axe; the page keeps its CSP
    page = context.new_page()
    page.goto(f"{live.url}/console/login")
    page.fill("#email", f"ops-{lang.lower()}@example.com")
    page.fill("#password", PASSWORD)
    page.click(SIGN_IN)
    problems += _check(page, "fleet", shots, lang)
    for name, path in (("tenants", "/console/tenants"),
                       ("tenant", f"/console/tenants/{tenant.tenant_id}"),
                       ("queue", "/console/tickets"), ("ops-ticket", f"/console/tickets/{ticket}"),
                       ("node", f"/console/nodes/{node}"), ("ops-audit", "/console/audit"),
                       ("invoices", "/console/invoices"), ("prices", "/console/prices"),
                       ("enroll", "/console/nodes/enroll")):
        page.goto(f"{live.url}{path}")
        problems += _check(page, name, shots, lang)
    context.close()
    assert not problems, "\n".join(problems)
    assert len(list(shots.glob(f"{lang}-*.png"))) == 2 * 27
