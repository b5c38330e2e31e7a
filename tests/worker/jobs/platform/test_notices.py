"""The notices job: what the outbox holds goes out by e-mail and by the tenant's signed
webhook, each channel once; a webhook that fails is tried again at a later run without
mailing twice."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.platform import notify
from gpulease.services.platform.outbox import Notice, post_notice
from gpulease.testing.callers import TenantCtx
from gpulease.worker.jobs.platform import notices
from tests.fixtures.mail import Inbox, Receiver


def test_each_notice_goes_once_by_each_channel(
    fleet: Platform, tenant: TenantCtx, smtp: Inbox, receiver: Receiver
) -> None:
    fleet.settings.egress_allow = ["127.0.0.1/32"]  # the test's receiver, on loopback
    notify.set_webhook(fleet, tenant.principal, receiver.url)
    receiver.status = 500
    with fleet.db.write() as s:
        post_notice(s, Notice(tenant.tenant_id, "low_balance", "Your balance is low."),
                    fleet.clock.now())
    assert notices.JOB.run(fleet, "test") == 0  # mailed; the webhook failed
    assert len(smtp.messages) == 1 and len(receiver.calls) == 1
    receiver.status = 204
    assert notices.JOB.run(fleet, "test") == 1
    assert notices.JOB.run(fleet, "test") == 0  # nothing left
    assert len(smtp.messages) == 1 and len(receiver.calls) == 2
