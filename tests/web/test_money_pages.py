"""Money in the console moves only after the tenant has seen it: the order's review shows
the quote (lines, VAT, total) and holds nothing until confirmed, and then holds exactly
the total shown; a wallet too short is said on the review, with no confirm button; bad
input comes back on the order form with what was typed; a release states what is
refunded and kept (and matches what the release then refunds); a renewal shows its charge
and new end before charging it; the lease card shows expiry, days left, auto-renew and
the grace banner. SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpulease.api.app import create_app
from gpulease.db.money_tables import LedgerEntry
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.services.money import leases, release_terms, wallet
from gpulease.testing.callers import new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.runner import Worker
from tests.web.console import ORDER, signed_in

SKU, REGION = "h100-80g-x8", "ningxia-1"


def yuan(text: str, element: str) -> Decimal:
    found = re.search(rf'id="{element}">¥([0-9,.]+)<', text)
    assert found, f"no {element} on the page"
    return Decimal(found.group(1).replace(",", ""))


def holds(p: Platform, tenant_id: str) -> list[Decimal]:
    with p.db.read() as s:
        return list(s.scalars(select(LedgerEntry.amount).where(
            LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind == "hold")))


def test_an_order_is_reviewed_then_holds_exactly_the_total_shown(
        fleet: Platform, key: str) -> None:
    t = new_tenant(fleet)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        listed = client.get("/console/catalog").text
        assert f"/console/order?sku={SKU}&amp;region={REGION}" in listed
        form = client.get("/console/order", params={"sku": SKU, "region": REGION})
        assert form.status_code == 200 and 'for="ssh_key"' in form.text, form.text[-1500:]
        assert 'for="addon-public-bandwidth"' in form.text and 'id="image"' in form.text

        review = client.post("/console/orders", data=ORDER | {"ssh_key": key})
        assert review.status_code == 200 and "Review your order" in review.text
        total = yuan(review.text, "total")
        assert yuan(review.text, "vat") > 0 and "Public bandwidth" in review.text
        assert "Help with your own software" in review.text and 'id="confirm"' in review.text
        assert holds(fleet, t.tenant_id) == []  # nothing held by a review
        assert instances.list_instances(fleet, t.principal).total == 0

        placed = client.post("/console/orders", data=ORDER | {"ssh_key": key,
                                                              "confirmed": "true"},
                             follow_redirects=False)
        assert placed.status_code == 303 and "/console/instances/i-" in placed.headers[
            "location"]
        assert holds(fleet, t.tenant_id) == [-total]  # the hold is the total shown
        again = client.get("/console/order", params={"sku": SKU, "region": REGION})
        assert key in again.text  # the last order's keys start the next one


def test_a_short_wallet_and_bad_input_are_said_on_the_page(fleet: Platform, key: str) -> None:
    t = new_tenant(fleet, funds="100")
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        review = client.post("/console/orders", data=ORDER | {"ssh_key": key})
        assert review.status_code == 200 and 'id="short"' in review.text
        assert 'id="confirm"' not in review.text and "Top up" in review.text
        bad = client.post("/console/orders", data=ORDER | {"nodes": "2", "ssh_key": key})
        assert bad.status_code == 422 and "order a cluster" in bad.text
        assert key in bad.text and 'id="order-form"' in bad.text  # what was typed stays
        unknown = client.get("/console/order", params={"sku": "nope", "region": REGION})
        assert unknown.status_code == 404 and "no such offer" in unknown.text
        assert holds(fleet, t.tenant_id) == []


def test_release_says_what_is_refunded_and_kept_then_does_that(
        fleet: Platform, worker: Worker, key: str) -> None:
    t = new_tenant(fleet)
    clock = MovableClock(fleet.clock.now())
    fleet.clock = clock
    iid = deliver(fleet, t, worker, key, term="day")
    leases.renew(fleet, t.principal, iid, periods=3)  # three days not begun
    clock.move(hours=2)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        page = client.get(f"/console/instances/{iid}")
        assert 'id="lease"' in page.text and 'id="days-left">3.9<' in page.text
        assert 'id="backup"' in page.text and f"/console/instances/{iid}/release" in page.text
        terms = client.get(f"/console/instances/{iid}/release")
        refund = yuan(terms.text, "refund")
        shown = release_terms.release_terms(fleet, t.principal, iid)
        assert refund == shown.refund > 0 and yuan(terms.text, "kept") == shown.kept
        assert "UTC+08:00)" in shown.summary  # the tenant's calendar, not UTC
        assert "3 period(s) not begun" in terms.text and "20% early-termination" in terms.text
        # a post without the confirmation is the same question again, nothing released
        asked = client.post(f"/console/instances/{iid}/release")
        assert asked.status_code == 200 and 'id="confirm-release"' in asked.text
        assert instances.show_instance(fleet, t.principal, iid).status == "ready"
        before = wallet.show_wallet(fleet, t.principal).balance
        done = client.post(f"/console/instances/{iid}/release", data={"confirmed": "true"},
                           follow_redirects=False)
        assert done.status_code == 303
        assert wallet.show_wallet(fleet, t.principal).balance - before == refund
        assert client.get(f"/console/instances/{iid}/release").status_code == 409


def test_renewal_is_shown_then_charged_and_grace_is_on_the_lease_card(
        fleet: Platform, worker: Worker, key: str) -> None:
    t = new_tenant(fleet)
    clock = MovableClock(fleet.clock.now())
    fleet.clock = clock
    iid = deliver(fleet, t, worker, key, term="day")
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        review = client.post(f"/console/instances/{iid}/renew",
                             data={"periods": "2", "term": "day"})
        total = yuan(review.text, "renewal-total")
        before = wallet.show_wallet(fleet, t.principal).balance
        lease = leases.show_lease(fleet, t.principal, iid)
        assert wallet.show_wallet(fleet, t.principal).balance == before  # nothing yet
        done = client.post(f"/console/instances/{iid}/renew",
                           data={"periods": "2", "term": "day", "confirmed": "true"},
                           follow_redirects=False)
        assert done.status_code == 303
        assert before - wallet.show_wallet(fleet, t.principal).balance == total
        assert leases.show_lease(fleet, t.principal, iid).ends_at == lease.ends_at + timedelta(
            days=2)
        toggled = client.post(f"/console/instances/{iid}/auto-renew", data={"on": "true"},
                              follow_redirects=True)
        assert 'id="auto-renew">on<' in toggled.text
        leases.set_auto_renew(fleet, t.principal, iid, False)
        clock.move(days=3, hours=1)  # past the end: grace
        lease_sweep.sweep_leases(fleet)
        signed_in(fleet, t, client, again=True)  # the console's session lasts 12 hours
        page = client.get(f"/console/instances/{iid}").text
        assert 'id="grace"' in page and "renew to keep it" in page


def test_the_advisors_recommendation_is_one_click_from_its_filled_order_form(
        fleet: Platform, key: str) -> None:
    t = new_tenant(fleet)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        empty = client.get("/console/advise")
        assert empty.status_code == 200 and 'for="params"' in empty.text
        advised = client.get("/console/advise", params={
            "params": "70B", "workload": "full-finetune", "tokens": "1000000000"})
        assert advised.status_code == 200 and 'id="recommendation"' in advised.text
        link = re.search(r'href="([^"]+)" id="order-recommended"', advised.text)
        assert link, advised.text[-2000:]
        url = link.group(1).replace("&amp;", "&")
        assert "kind=cluster" in url and "nodes=" in url  # 70B full fine-tune: a cluster
        nodes = re.search(r"nodes=(\d+)", url)
        assert nodes
        form = client.get(url)
        assert form.status_code == 200
        assert f'name="nodes" type="number" min="1" value="{nodes.group(1)}"' in form.text
        assert '<option value="cluster" selected>' in form.text
        bad = client.get("/console/advise", params={"params": "70B", "workload": "dancing"})
        assert bad.status_code == 422 and "workload" in bad.text
        assert 'value="70B"' in bad.text  # what was typed stays


def _once(page_text: str) -> str:
    found = re.search(r'name="once" value="([A-Za-z0-9_-]+)"', page_text)
    assert found, "the form carries no one-time key"
    return found.group(1)


def test_a_confirmation_sent_twice_buys_once(fleet: Platform, worker: Worker,
                                             key: str) -> None:
    """The back button after paying, then Confirm on the re-shown review, placed a second
    order; the same review in two tabs placed two. A renewal confirmed twice renewed
    twice; F5 on the token page minted a second token."""
    t = new_tenant(fleet)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        review = client.post("/console/orders", data=ORDER | {"ssh_key": key})
        confirm = ORDER | {"ssh_key": key, "confirmed": "true", "once": _once(review.text)}
        first = client.post("/console/orders", data=confirm, follow_redirects=False)
        second = client.post("/console/orders", data=confirm, follow_redirects=False)
        assert first.status_code == second.status_code == 303
        assert first.headers["location"] == second.headers["location"]  # the same order
        assert instances.list_instances(fleet, t.principal).total == 1
        assert len(holds(fleet, t.tenant_id)) == 1
        other = client.post("/console/orders", data=ORDER | {"ssh_key": key})  # a new review
        assert _once(other.text) != _once(review.text)

    iid = deliver(fleet, t, worker, key, term="day")
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client, again=True)
        lease = leases.show_lease(fleet, t.principal, iid)
        shown = client.post(f"/console/instances/{iid}/renew",
                            data={"periods": "1", "term": "day"})
        renewal = {"periods": "1", "term": "day", "confirmed": "true",
                   "once": _once(shown.text)}
        for _ in range(2):
            assert client.post(f"/console/instances/{iid}/renew", data=renewal,
                               follow_redirects=False).status_code == 303
        assert leases.show_lease(fleet, t.principal, iid).ends_at == lease.ends_at + timedelta(
            days=1)  # renewed once

        account = client.get("/console/account")
        token_form = {"name": "ci", "days": "5", "once": _once(account.text)}
        made = client.post("/console/account/tokens", data=token_form)
        again = client.post("/console/account/tokens", data=token_form)  # F5
        assert 'id="new-token"' in made.text and 'id="new-token"' not in again.text
        assert "sent already" in again.text
        from gpulease.services.accounts import identity as accounts
        names = [tk.name for tk in accounts.list_tokens(fleet, t.principal).items
                 if tk.revoked_at is None]
        assert names.count("ci") == 1
