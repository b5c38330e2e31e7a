"""The password-resets job mails each asked-for link once."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.accounts.password_resets import request_reset
from gpulease.testing.callers import TenantCtx
from gpulease.worker.jobs.accounts import password_resets
from tests.fixtures.mail import Inbox


def test_each_link_is_mailed_once(fleet: Platform, tenant: TenantCtx, smtp: Inbox) -> None:
    request_reset(fleet, f"{_name(fleet, tenant)}@example.com")
    request_reset(fleet, "nobody@example.com")  # asked for an unknown address: no mail
    password_resets.JOB.run(fleet, "test")
    password_resets.JOB.run(fleet, "test")
    assert len(smtp.messages) == 1
    body = smtp.messages[0].get_body(("plain",))
    assert body is not None and "/console/reset?token=rst_" in body.get_content()


def _name(p: Platform, t: TenantCtx) -> str:
    from gpulease.services.accounts import users

    return users.list_users(p, t.principal).items[0].email.split("@")[0]
