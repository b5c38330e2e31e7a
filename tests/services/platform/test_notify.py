"""Lease reminders reach a real SMTP server (aiosmtpd) and a webhook receiver, each once,
with signatures that verify; a failing webhook is retried without mailing twice.
SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice
from gpulease.db.tables import User
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.billing.leases import local_text
from gpulease.domain.errors import Forbidden, InvalidInput
from gpulease.platform import Platform
from gpulease.services.money import leases
from gpulease.services.platform import notify
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.runner import Worker
from tests.fixtures.mail import Inbox, Receiver


def test_reminders_by_email_and_signed_webhook(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    smtp: Inbox, receiver: Receiver,
) -> None:
    fleet.settings.egress_allow = ["127.0.0.1/32"]  # the test's receiver, on loopback
    hook = notify.set_webhook(fleet, tenant.principal, receiver.url)
    assert hook["secret"].startswith("whsec_")
    iid = deliver(fleet, tenant, worker, key)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    clock.at = lease.ends_at - timedelta(days=6)
    lease_sweep.sweep_leases(fleet)
    assert notify.deliver_notices(fleet) == 1
    assert notify.deliver_notices(fleet) == 0  # sent once
    (mail,) = smtp.messages
    with fleet.db.read() as s:
        admin = s.get(User, tenant.principal.user_id).email  # type: ignore[union-attr]
    assert mail["To"] == admin and mail["From"] == "billing@provider.example"
    assert mail["Subject"] == f"[gpulease] Lease of {iid} ends in 7 days"
    # the end on the platform's calendar (Asia/Shanghai), with its offset
    assert local_text(lease.ends_at, fleet.settings.zone) in mail.get_content()
    assert "UTC+08:00" in mail.get_content()
    ((headers, body),) = receiver.calls
    assert notify.verify_signature(hook["secret"], headers["X-Gpulease-Signature"], body)
    assert not notify.verify_signature(hook["secret"], headers["X-Gpulease-Signature"],
                                       body.replace(b"7d", b"1d"))
    assert not notify.verify_signature("whsec_other", headers["X-Gpulease-Signature"], body)
    stale = time.time() + 3600
    assert not notify.verify_signature(hook["secret"], headers["X-Gpulease-Signature"], body,
                                       now=stale)
    event = json.loads(body)
    assert event["event"] == "lease.7d" and event["instance_id"] == iid

    # the expiry reminder: the webhook fails first, the e-mail goes once, the webhook later
    receiver.status = 500
    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert notify.deliver_notices(fleet) == 0
    assert len(smtp.messages) == 2 and "grace period started" in smtp.messages[1]["Subject"]
    receiver.status = 204
    assert notify.deliver_notices(fleet) == 1
    assert len(smtp.messages) == 2 and len(receiver.calls) == 3
    assert json.loads(receiver.calls[-1][1])["event"] == "lease.expiry"


def test_webhook_registration_rules(fleet: Platform, tenant: TenantCtx) -> None:
    with pytest.raises(InvalidInput) as exc:
        notify.set_webhook(fleet, tenant.principal, "ftp://example.com")
    assert exc.value.field == "url"
    member = Principal(user_id="usr-member", role=Role.MEMBER, tenant_id=tenant.tenant_id)
    with pytest.raises(Forbidden):
        notify.set_webhook(fleet, member, "https://example.com/h")


def test_each_admin_is_mailed_in_their_own_language(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    smtp: Inbox,
) -> None:
    from gpulease.services.accounts import identity as accounts
    from gpulease.services.accounts import users

    other = accounts.add_user(fleet, tenant.principal, accounts.Person("li@example.com", "Li",
                                                                       Role.ADMIN, None))
    users.set_locale(fleet, Principal(user_id=other.id, role=Role.ADMIN,
                                      tenant_id=tenant.tenant_id), "zh-CN")
    iid = deliver(fleet, tenant, worker, key)
    clock.at = leases.show_lease(fleet, tenant.principal, iid).ends_at - timedelta(days=6)
    lease_sweep.sweep_leases(fleet)
    assert notify.deliver_notices(fleet) == 1
    subjects = {m["To"]: m["Subject"] for m in smtp.messages}
    assert subjects["li@example.com"] == f"[gpulease] {iid} 的租期将在 7 天后到期"
    assert len(subjects) == 2 and any(
        s == f"[gpulease] Lease of {iid} ends in 7 days" for s in subjects.values())
    bodies = {m["To"]: m.get_content() for m in smtp.messages}  # the body too, figures kept
    assert bodies["li@example.com"].startswith(f"您的 {iid}（h100-80g-x8）租约将于 ")
    assert "请续租或备份数据：到期 3 天后磁盘将被擦除。" in bodies["li@example.com"]
    english = next(b for to, b in bodies.items() if to != "li@example.com")
    assert english.startswith(f"Your lease of {iid} (h100-80g-x8) ends ")
    with fleet.db.read() as s:  # the webhook and the operator's views keep the English
        assert s.scalar(select(LeaseNotice.text)) == english.strip()
