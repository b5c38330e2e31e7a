"""Password reset by e-mail, through a real SMTP server (aiosmtpd on 127.0.0.1): a new user
asks in the console, the worker mails a signed link, the link sets the password once within
30 minutes, and the user signs in. SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpulease.api.app import create_app
from gpulease.db.tables import ApiToken, PasswordReset
from gpulease.domain.accounts import Role
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import password_resets
from gpulease.testing.callers import new_tenant
from gpulease.testing.clock import MovableClock
from tests.fixtures.mail import Inbox

LINK = re.compile(r"(http://\S+/console/reset\?token=(rst_\S+))")
PASSWORD = "plain old winter sunset"


def _mailed_link(p: Platform, inbox: Inbox, to: str) -> tuple[str, str]:
    password_resets.deliver_reset_mails(p)
    mails = [m for m in inbox.messages if m["To"] == to]
    assert mails, f"no mail to {to}"
    found = LINK.search(mails[-1].get_content())
    assert found, mails[-1].get_content()
    return found.group(1), found.group(2)


def test_a_new_user_sets_a_password_by_mail_and_signs_in(
        fleet: Platform, smtp: Inbox) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    admin = new_tenant(fleet, "acme")
    accounts.add_user(fleet, admin.principal, accounts.Person("New.Person@acme.example", "New",
                                                              Role.MEMBER, None))
    web = TestClient(create_app(fleet), base_url="http://127.0.0.1")

    # Asking answers the same for an account and for nobody; only the account gets a mail.
    asked = web.post("/console/forgot", data={"email": "new.person@ACME.example"})
    nobody = web.post("/console/forgot", data={"email": "nobody@acme.example"})
    assert asked.status_code == nobody.status_code == 202
    assert "If new.person@ACME.example has an account" in asked.text
    link, token = _mailed_link(fleet, smtp, "new.person@acme.example")
    assert len(smtp.messages) == 1 and smtp.messages[0]["From"] == "billing@provider.example"
    assert link.startswith(fleet.settings.public_url)
    with fleet.db.read() as s:  # the database holds the id only, not the link's MAC
        row = s.scalars(select(PasswordReset)).one()
    assert row.mailed_at is not None and token.split(".")[1] not in str(vars(row))

    # The link opens a form; two different passwords or a short one are refused.
    form = web.get(link.removeprefix("http://127.0.0.1:8000"))
    assert form.status_code == 200 and token in form.text
    differ = web.post("/console/reset", data={"token": token, "password": PASSWORD,
                                              "again": PASSWORD + "!"})
    assert differ.status_code == 422 and "differ" in differ.text
    short = web.post("/console/reset", data={"token": token, "password": "short",
                                             "again": "short"})
    assert short.status_code == 422 and "12 characters" in short.text
    done = web.post("/console/reset", data={"token": token, "password": PASSWORD,
                                            "again": PASSWORD})
    assert done.status_code == 200 and "Your password is set" in done.text
    signed_in = web.post("/console/login", data={"email": "new.person@acme.example",
                                                 "password": PASSWORD},
                         follow_redirects=False)
    assert signed_in.status_code == 303 and "gpulease_session" in signed_in.cookies

    # Once only.
    again = web.post("/api/v1/password-resets/complete",
                     json={"token": token, "password": "another long password"})
    assert again.status_code == 422 and again.json()["field"] == "token"
    assert "used or expired" in again.json()["detail"]


def test_links_expire_are_signed_and_a_reset_ends_sessions(
        fleet: Platform, smtp: Inbox) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    admin = new_tenant(fleet, "acme")
    accounts.add_user(fleet, admin.principal, accounts.Person(
        "ops@acme.example", "Ops", Role.ADMIN, "the first long password"))
    session = accounts.console_login(fleet, "ops@acme.example", "the first long password")
    api = TestClient(create_app(fleet))

    def ask() -> tuple[str, str]:
        r = api.post("/api/v1/password-resets", json={"email": "ops@acme.example"})
        assert r.status_code == 202 and "30 minutes" in r.json()["detail"]
        return _mailed_link(fleet, smtp, "ops@acme.example")

    _, stale = ask()
    clock.move(minutes=31)
    r = api.post("/api/v1/password-resets/complete",
                 json={"token": stale, "password": "a brand new password"})
    assert r.status_code == 422 and "expired" in r.json()["detail"]

    _, token = ask()
    reset_id, mac = token.split(".")
    for forged in (f"{reset_id}.{'0' * 64}", f"rst_{'0' * 32}.{mac}", "rst_", "glp_x",
                   f"{reset_id}.{mac[:-1]}"):
        r = api.post("/api/v1/password-resets/complete",
                     json={"token": forged, "password": "a brand new password"})
        assert r.status_code == 422, forged
    _, newer = ask()  # two links out: using one spends the other
    r = api.post("/api/v1/password-resets/complete",
                 json={"token": newer, "password": "a brand new password"})
    assert r.status_code == 204
    r = api.post("/api/v1/password-resets/complete",
                 json={"token": token, "password": "yet another password"})
    assert r.status_code == 422
    with fleet.db.read() as s:
        ended = s.scalar(select(ApiToken.revoked_at).where(ApiToken.id == session.id))
    assert ended is not None  # the console session signed in with the old password
    assert accounts.console_login(fleet, "ops@acme.example", "a brand new password")
    # The admin's API token is not a console session: it stays.
    assert api.get("/api/v1/me", headers={"Authorization": f"Bearer {admin.token}"}
                   ).status_code == 200

    # Three mails per account per 15 minutes at most (two went out in this window); then
    # asking answers the same, unmailed.
    before = len(smtp.messages)
    for _ in range(3):
        r = api.post("/api/v1/password-resets", json={"email": "ops@acme.example"})
        assert r.status_code == 202
    password_resets.deliver_reset_mails(fleet)
    assert len(smtp.messages) == before + 1


def test_no_smtp_server_says_so_and_a_disabled_user_gets_no_mail(
        fleet: Platform, smtp: Inbox) -> None:
    admin = new_tenant(fleet, "acme")
    gone = accounts.add_user(fleet, admin.principal, accounts.Person("gone@acme.example", "Gone",
                                                                     Role.READER, None))
    from gpulease.services.accounts import users

    users.disable_user(fleet, admin.principal, gone.id)
    api = TestClient(create_app(fleet))
    r = api.post("/api/v1/password-resets", json={"email": "gone@acme.example"})
    assert r.status_code == 202
    assert password_resets.deliver_reset_mails(fleet) == 0 and smtp.messages == []
    fleet.settings.smtp_host = ""
    r = api.post("/api/v1/password-resets", json={"email": "acme@example.com"})
    assert r.status_code == 409 and "GPULEASE_SMTP_HOST" in r.json()["detail"]
    page = api.post("/console/forgot", data={"email": "acme@example.com"})
    assert page.status_code == 409 and "ask your tenant admin" in page.text
