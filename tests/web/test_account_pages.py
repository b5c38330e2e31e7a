"""The account pages: a password changed only when typed twice alike and the current one
is right; an API token shown once and refused once revoked; a tenant admin adds a user
(a member cannot) and disables them (their sign-in refused); the webhook takes a public
address only and shows its secret once. SQLite and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.domain.errors import Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import quotas
from gpulease.services.platform import egress
from gpulease.testing.callers import new_operator, new_tenant
from tests.fixtures.browser import PASSWORD
from tests.web.console import signed_in


def _login(client: TestClient, email: str, password: str) -> int:
    client.cookies.clear()
    return client.post("/console/login", data={"email": email, "password": password},
                       follow_redirects=False).status_code


def test_password_and_tokens(platform: Platform) -> None:
    t = new_tenant(platform)
    email = f"{t.principal.user_id}"
    with TestClient(create_app(platform)) as client:
        signed_in(platform, t, client)
        page = client.get("/console/account")
        assert page.status_code == 200 and 'id="tokens"' in page.text
        email = re.search(r'<span class="label">E-mail</span>([^<]+)<', page.text)
        assert email
        address = email.group(1).strip()

        differ = client.post("/console/account/password", data={
            "current": PASSWORD, "password": "a brand new secret", "again": "another one!!"})
        assert differ.status_code == 422 and "differ" in differ.text
        wrong = client.post("/console/account/password", data={
            "current": "not my password", "password": "a brand new secret",
            "again": "a brand new secret"})
        assert wrong.status_code == 403 and "current password is wrong" in wrong.text
        done = client.post("/console/account/password", data={
            "current": PASSWORD, "password": "a brand new secret",
            "again": "a brand new secret"})
        assert done.status_code == 200 and 'id="done"' in done.text

        made = client.post("/console/account/tokens", data={"name": "laptop", "days": "30"})
        secret = re.search(r'id="new-token">.*?<code class="secret">([^<]+)</code>', made.text,
                           re.S)
        assert secret and accounts.authenticate(platform, secret.group(1)).user_id
        again = client.get("/console/account").text
        assert secret.group(1) not in again and "laptop" in again  # shown once
        token_id = next(x.id for x in accounts.list_tokens(platform, t.principal).items
                        if x.name == "laptop")
        client.post(f"/console/account/tokens/{token_id}/revoke")
        with pytest.raises(Unauthorized):
            accounts.authenticate(platform, secret.group(1))

        assert _login(client, address, PASSWORD) == 401  # the old password is gone
        assert _login(client, address, "a brand new secret") == 303


def test_the_team_and_the_webhook(platform: Platform, monkeypatch: pytest.MonkeyPatch
                                  ) -> None:
    t = new_tenant(platform)
    monkeypatch.setattr(egress, "_resolve", lambda host, port: ["8.8.4.4"])  # nothing sent
    with TestClient(create_app(platform)) as client:
        signed_in(platform, t, client)
        added = client.post("/console/account/users", data={
            "email": "dev@example.com", "name": "Dev", "role": "member",
            "password": "the member's own pw"})
        assert added.status_code == 200 and "dev@example.com" in added.text
        bad_role = client.post("/console/account/users", data={
            "email": "x@example.com", "name": "X", "role": "owner"})
        assert bad_role.status_code == 422 and "owner" in bad_role.text

        refused = client.post("/console/account/webhook", data={"url": "http://127.0.0.1:9/h"})
        assert refused.status_code == 422 and "loopback" in refused.text
        hook = client.post("/console/account/webhook",
                           data={"url": "https://hooks.example.com/gpulease"})
        assert hook.status_code == 200 and 'id="webhook-secret"' in hook.text
        assert "whsec_" in hook.text and "whsec_" not in client.get("/console/account").text

        member = client.get("/console/account").text
        user_id = re.search(r'action="/console/account/users/([^/]+)/disable"><button '
                            r'class="secondary" type="submit" data-user="dev@example.com"',
                            member)
        assert user_id
        client.post(f"/console/account/users/{user_id.group(1)}/disable")
        assert _login(client, "dev@example.com", "the member's own pw") == 401
        signed_in(platform, t, client, again=True)
        client.post(f"/console/account/users/{user_id.group(1)}/enable")
        assert _login(client, "dev@example.com", "the member's own pw") == 303
        as_member = client.post("/console/account/users", data={
            "email": "y@example.com", "name": "Y", "role": "member"})
        assert as_member.status_code == 403  # only a tenant admin adds users
        assert 'id="team"' not in client.get("/console/account").text


def test_storage_and_backups_and_the_audit_trail(fleet: Platform, key: str) -> None:
    from gpulease.testing.factories import deliver
    from gpulease.worker.runner import Worker

    t = new_tenant(fleet)
    iid = deliver(fleet, t, Worker(fleet, owner="records"), key)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        client.post("/console/account/tokens", data={"name": "audited", "days": "7"})
        shown = client.get("/console/storage")
        assert shown.status_code == 200 and f'id="backups-{iid}"' in shown.text
        assert 'id="no-storage"' in shown.text  # this platform runs no object storage
        assert f"gpulease backup {iid}" in shown.text
        trail = client.get("/console/audit")
        assert trail.status_code == 200 and "POST /console/account/tokens" in trail.text
        assert "POST /console/login" in trail.text
        other = new_tenant(fleet)
        with TestClient(create_app(fleet)) as theirs:
            signed_in(fleet, other, theirs)
            own = theirs.get("/console/audit").text  # another tenant's admin: their own
            assert "POST /console/account/tokens" not in own
            theirs.post("/console/account/users", data={
                "email": "m@other.example", "name": "M", "role": "member",
                "password": "member password!"})
            assert _login(theirs, "m@other.example", "member password!") == 303
            assert theirs.get("/console/audit").status_code == 403  # members do not


def test_a_console_sign_in_refused_for_too_many_failures_says_when_to_retry(
    platform: Platform
) -> None:
    with TestClient(create_app(platform)) as client:
        for _ in range(platform.settings.sign_in_failures_per_account):
            assert _login(client, "someone@example.com", "wrong guess") == 401
        client.cookies.clear()
        refused = client.post("/console/login", data={"email": "someone@example.com",
                                                      "password": "wrong guess"},
                              follow_redirects=False)
        assert refused.status_code == 429
        assert 0 < int(refused.headers["retry-after"]) <= 15 * 60 + 2
        assert refused.headers["cache-control"] == "no-store"


def test_the_budget_and_the_gpu_quotas_on_the_account_page(fleet: Platform) -> None:
    t = new_tenant(fleet)
    quotas.set_quota(fleet, new_operator(fleet).principal, t.tenant_id,
                     "h100-80g-x8@ningxia-1", 8)
    with TestClient(create_app(fleet)) as client:
        signed_in(fleet, t, client)
        page = client.get("/console/account").text
        assert "No monthly budget" in page and 'id="budget-form"' in page
        assert "h100-80g-x8@ningxia-1" in page and 'id="gpu-quotas"' in page
        bad = client.post("/console/account/budget", data={"monthly_budget": "lots"})
        assert bad.status_code == 422 and "such as 100000" in bad.text
        done = client.post("/console/account/budget", data={"monthly_budget": "¥100,000"})
        assert done.status_code == 200 and "¥0.00 of ¥100,000.00 spent" in done.text
        client.post("/console/lang", data={"to": "zh_CN"})
        assert "已支出 ¥0.00 / ¥100,000.00" in client.get("/console/account").text
        cleared = client.post("/console/account/budget", data={"monthly_budget": ""})
        assert "未设月度预算" in cleared.text
