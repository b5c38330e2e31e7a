"""The egress guard: a tenant's webhook may lead only to a public address. Refusals are
asserted without sending anything; the sends go to an allow-listed loopback receiver.
Names are answered by a stand-in resolver (no DNS query leaves the machine)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.errors import InvalidInput
from gpulease.platform import Platform
from gpulease.services.money import leases
from gpulease.services.platform import egress, notify
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.runner import Worker
from tests.fixtures.mail import Receiver

REFUSED = [
    ("http://127.0.0.1:9/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "address"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),  # cloud metadata
    ("http://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/hook", "private"),
    ("http://172.16.5.4/hook", "private"),
    ("http://100.64.0.7/hook", "not a public address"),  # carrier-grade NAT
    ("http://0.0.0.0/hook", "unspecified"),
    ("http://224.0.0.1/hook", "multicast"),
    ("https://localhost/hook", "loopback"),  # a name: resolved (the stand-in answers)
    ("http://user:pw@hooks.example.com/", "credentials"),
]


@pytest.mark.parametrize(("url", "says"), REFUSED)
def test_non_public_targets_are_refused(platform: Platform, url: str, says: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        egress.check(platform.settings, url, resolve=lambda host, port: ["127.0.0.1"])
    assert exc.value.field == "url" and says in exc.value.detail


def test_every_answer_of_a_name_must_pass_and_the_provider_can_deny_and_allow(
        platform: Platform) -> None:
    st = platform.settings
    # a name answering a public and a private address is refused
    with pytest.raises(InvalidInput, match="10.0.0.8, a private"):
        egress.check(st, "https://hooks.example.com/x",
                     resolve=lambda h, p: ["8.8.4.4", "10.0.0.8"])
    target = egress.check(st, "https://hooks.example.com:8443/x",
                          resolve=lambda h, p: ["8.8.4.4"])
    assert target.pinned_url() == "https://8.8.4.4:8443/x" and target.host == "hooks.example.com"
    st.egress_deny = ["8.8.4.0/24"]  # the provider's own public range
    with pytest.raises(InvalidInput, match="provider's own networks"):
        egress.check(st, "https://hooks.example.com/x", resolve=lambda h, p: ["8.8.4.4"])
    st.egress_allow = ["10.20.0.0/16", "hooks.internal"]
    assert egress.check(st, "http://10.20.1.1/x").address == "10.20.1.1"
    assert egress.check(st, "http://hooks.internal/x").address is None  # allowed by name
    with pytest.raises(InvalidInput, match="does not resolve"):
        egress.check(st, "https://nowhere.invalid/x", resolve=lambda h, p: [])


def test_a_webhook_to_the_providers_network_is_refused_at_registration(
        fleet: Platform, tenant: TenantCtx) -> None:
    for url in ("http://127.0.0.1:8000/api/v1/tenants", "http://169.254.169.254/"):
        with pytest.raises(InvalidInput, match="public addresses"):
            notify.set_webhook(fleet, tenant.principal, url)


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A name whose answer the test changes between registration and send."""
    answer = ["8.8.4.4"]
    monkeypatch.setattr(egress, "_resolve", lambda host, port: list(answer))
    yield answer


def test_a_name_that_turns_private_after_registration_gets_nothing(
        fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker,
        key: str, receiver: Receiver, rebinding: list[str]) -> None:
    port = receiver.url.split(":")[2].split("/")[0]
    notify.set_webhook(fleet, tenant.principal, f"http://hooks.example.com:{port}/h")
    rebinding[:] = ["127.0.0.1"]  # now it points at the control plane's own host
    iid = deliver(fleet, tenant, worker, key)
    clock.at = leases.show_lease(fleet, tenant.principal, iid).ends_at - timedelta(days=6)
    lease_sweep.sweep_leases(fleet)
    assert notify.deliver_notices(fleet) == 0
    assert receiver.calls == []  # nothing reached loopback
    with fleet.db.read() as s:
        notice = s.scalars(select(LeaseNotice)).one()
    assert notice.last_error and "127.0.0.1, a loopback address" in notice.last_error
    # allow-listed by the operator, the same name is called, at the checked address
    fleet.settings.egress_allow = ["127.0.0.1/32"]
    assert notify.deliver_notices(fleet) == 1
    ((headers, _),) = receiver.calls
    assert headers["Host"] == f"hooks.example.com:{port}"
