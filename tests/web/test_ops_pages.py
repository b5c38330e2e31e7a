"""The operator's tenants and the ticket queue in the console: a tenant created with its
admin's token shown once; a top-up booked once per payment reference; a credit limit;
suspension refuses the tenant's orders and reinstatement lifts it; a tenant opens a
ticket about its instance, the operator sees it with its SLA clocks, acknowledges and
resolves it, and an internal comment never reaches the tenant. SQLite and PostgreSQL."""

from __future__ import annotations

import re
from decimal import Decimal

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpulease.api.app import create_app
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import tenants, users
from gpulease.services.fleet import inventory, node_changes
from gpulease.services.money import wallet
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import deliver
from gpulease.worker.runner import Worker
from tests.fixtures.browser import PASSWORD
from tests.web.console import ORDER, operator_in, signed_in


def test_tenants_top_ups_credit_and_suspension(fleet: Platform, key: str) -> None:
    with TestClient(create_app(fleet)) as client:
        operator_in(fleet, client)
        made = client.post("/console/tenants", data={
            "name": "新客户", "admin_email": "boss@newco.example", "admin_name": "Boss"})
        token = re.search(r'id="created">.*?<code class="secret">([^<]+)</code>', made.text,
                          re.S)
        assert made.status_code == 200 and token
        admin = accounts.authenticate(fleet, token.group(1))
        assert admin.tenant_id and "新客户" in client.get("/console/tenants").text
        again = client.post("/console/tenants", data={
            "name": "新客户", "admin_email": "other@newco.example", "admin_name": "X"})
        assert again.status_code == 409 and "exists already" in again.text
        bad_mail = client.post("/console/tenants", data={
            "name": "n2", "admin_email": "not-an-address", "admin_name": "X"})
        assert bad_mail.status_code == 422 and "admin_email" in bad_mail.text

        tid = admin.tenant_id
        page = client.get(f"/console/tenants/{tid}")
        assert page.status_code == 200 and 'id="top-up-form"' in page.text
        booked = client.post(f"/console/tenants/{tid}/top-up",
                             data={"amount": "200,000.00", "reference": "WIRE-1"})
        assert booked.status_code == 200 and 'id="done"' in booked.text
        twice = client.post(f"/console/tenants/{tid}/top-up",
                            data={"amount": "200000", "reference": "WIRE-1"})
        assert twice.status_code == 409  # a retried form cannot double the money
        not_money = client.post(f"/console/tenants/{tid}/top-up",
                                data={"amount": "lots", "reference": "WIRE-2"})
        assert not_money.status_code == 422 and "not an amount" in not_money.text
        assert wallet.show_wallet(fleet, admin).balance == Decimal("200000.00")
        client.post(f"/console/tenants/{tid}/credit-limit", data={"credit_limit": "5000"})
        assert wallet.show_wallet(fleet, admin).credit_limit == Decimal("5000.00")

        client.post(f"/console/tenants/{tid}/suspend", data={"reason": "unpaid invoice"})
        assert tenants.show_tenant(fleet, accounts.authenticate(
            fleet, accounts.create_operator(fleet, "o2@example.com", "O")[1].token),
            tid).status == "suspended"
        users.change_password(fleet, admin, PASSWORD, None)
        as_tenant = TestClient(create_app(fleet))
        with as_tenant:
            as_tenant.post("/console/login", data={"email": "boss@newco.example",
                                                   "password": PASSWORD})
            refused = as_tenant.post("/console/orders", data=ORDER | {
                "ssh_key": key, "confirmed": "true"}, follow_redirects=False)
            assert refused.status_code in (402, 403, 409) and "suspended" in refused.text
            assert as_tenant.get("/console/tenants").status_code == 403  # operators only
        client.post(f"/console/tenants/{tid}/reinstate")
        assert "status-active" in client.get(f"/console/tenants/{tid}").text


def test_a_ticket_from_the_tenant_through_the_operators_queue(
        fleet: Platform, worker: Worker, key: str) -> None:
    t: TenantCtx = new_tenant(fleet)
    iid = deliver(fleet, t, worker, key)
    with TestClient(create_app(fleet)) as tenant_browser, \
            TestClient(create_app(fleet)) as ops_browser:
        signed_in(fleet, t, tenant_browser)
        short = tenant_browser.post("/console/tickets", data={
            "instance_id": iid, "summary": "x", "severity": "P1"})
        assert short.status_code == 422 and "summary" in short.text
        opened = tenant_browser.post("/console/tickets", data={
            "instance_id": iid, "summary": "GPU 3 fell off the bus", "severity": "P1",
            "gpu": "3", "details": "nvidia-smi shows 7 GPUs"}, follow_redirects=False)
        assert opened.status_code == 303
        ticket_id = opened.headers["location"].rsplit("/", 1)[1]

        operator_in(fleet, ops_browser)
        queue = ops_browser.get("/console/tickets").text
        assert ticket_id in queue and 'data-clock="response"' in queue
        ops_browser.post(f"/console/tickets/{ticket_id}/comment",
                         data={"body": "spare card in rack 4", "internal": "true"})
        ops_browser.post(f"/console/tickets/{ticket_id}/acknowledge",
                         data={"note": "on it"})
        ops_browser.post(f"/console/tickets/{ticket_id}/resolve",
                         data={"note": "card reseated, burn-in passed"})
        seen = tenant_browser.get(f"/console/tickets/{ticket_id}").text
        assert "card reseated" in seen and "spare card in rack 4" not in seen
        assert 'id="acknowledge"' not in seen  # the tenant has no operator's buttons
        assert tenant_browser.post(f"/console/tickets/{ticket_id}/acknowledge"
                                   ).status_code == 403
        assert tenant_browser.post(f"/console/tickets/{ticket_id}/resolve"
                                   ).status_code == 409  # resolved already
        assert "resolved" in tenant_browser.get(f"/console/tickets/{ticket_id}").text


def test_the_fleet_filtered_and_one_nodes_page(fleet: Platform) -> None:
    import json

    from gpulease.db.tables import Node

    with fleet.db.write() as s:
        node = s.scalars(select(Node).where(Node.sku == "h100-80g-x8").order_by(Node.name)
                         ).first()
        assert node is not None
        node.inventory_json = json.dumps({"bmc": {"model": "PowerEdge XE9680", "cpus": 2},
                                          "comparison": {
                                              "offer": "h100-80g-x8@ningxia-1",
                                              "matches": False,
                                              "differences": ["memory: 1024 GB, not 2048 GB"],
                                              "unchecked": [], "checked": ["gpu model"],
                                              "notes": []}})
        node_id, name = node.id, node.name
    with TestClient(create_app(fleet)) as client:
        operator_in(fleet, client)
        page = client.get(f"/console/nodes/{node_id}")
        assert page.status_code == 200 and "memory: 1024 GB, not 2048 GB" in page.text
        assert "PowerEdge XE9680" in page.text and 'id="history"' in page.text
        drained = client.post(f"/console/nodes/{node_id}/drain",
                              data={"reason": "fan noise", "back": f"/console/nodes/{node_id}"},
                              follow_redirects=False)
        assert drained.status_code == 303 and drained.headers["location"].endswith(node_id)
        shown = client.get("/console/", params={"status": "maintenance"}).text
        assert name in shown and "fan noise" in shown
        others = client.get("/console/", params={"status": "available", "sku": "h100-80g-x8"})
        assert name not in others.text and "h100-80g-x8" in others.text
        bad = client.get("/console/", params={"status": "sleeping"})
        assert bad.status_code == 422 and "sleeping" in bad.text
        assert client.get("/console/nodes/no-such-node").status_code == 404
        client.post(f"/console/nodes/{node_id}/resume")
        assert "status-available" in client.get(f"/console/nodes/{node_id}").text
        # the lines the platform writes on a node's history, in the page's language
        op = accounts.authenticate(fleet, accounts.create_operator(
            fleet, "ops-faults@example.com", "Ops")[1].token)
        node_changes.inject_faults(fleet, op, node_id, [])
        client.cookies.set("gpulease_lang", "zh_CN")
        assert "模拟故障：无" in client.get(f"/console/nodes/{node_id}").text
        client.cookies.set("gpulease_lang", "en")
        assert "simulated faults: none" in client.get(f"/console/nodes/{node_id}").text
        # a status's reason as the move said it: the operator's own words as written, the
        # platform's in the page's language
        inventory.maintenance_node(fleet, op, node_id, None)
        client.cookies.set("gpulease_lang", "zh_CN")
        assert 'id="reason">由运维人员设为维护<' in client.get(f"/console/nodes/{node_id}").text


def test_invoice_runs_and_a_price_change_published_from_the_console(fleet: Platform) -> None:
    with TestClient(create_app(fleet)) as client:
        operator_in(fleet, client)
        prices = client.get("/console/prices")
        assert prices.status_code == 200 and "[[offers]]" in prices.text
        text = re.search(r'<textarea id="catalog-text"[^>]*>(.*?)</textarea>', prices.text,
                         re.S)
        assert text
        import html

        toml = html.unescape(text.group(1))
        broken = client.post("/console/prices", data={"text": toml + "\n[[offers]]\nsku = 1\n"})
        assert broken.status_code == 422 and 'id="prices-form"' in broken.text
        assert fleet.catalog_version is None or "version" in broken.text
        marker = 'sku = "h100-80g-x8"\nregion = "ningxia-1"\n'
        assert marker in toml, "the default catalog names the offer like this"
        at = toml.index("\n[[", toml.index(marker))  # after the offer's own keys
        announced = (toml[:at] + '\n[[offers.price_changes]]\neffective_from = 2027-03-01\n'
                     'monthly_price = "79000"\n' + toml[at:])
        done = client.post("/console/prices", data={"text": announced})
        assert done.status_code == 200 and 'id="done"' in done.text, re.findall(
            r'class="error"[^<]*', done.text)
        assert "¥79,000.00" in client.get("/console/prices").text
        assert fleet.catalog_version is not None

        shown = client.get("/console/invoices")
        assert shown.status_code == 200 and 'id="run-form"' in shown.text
        ran = client.post("/console/invoices/run", data={"period": "2026-11"})
        assert ran.status_code == 200 and 'id="ran"' in ran.text
        future = client.post("/console/invoices/run", data={"period": "2099-01",
                                                             "finalize": "true"})
        assert future.status_code in (409, 422) and 'id="run-form"' in future.text
