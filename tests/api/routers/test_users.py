"""Users over HTTP and through the CLI: a tenant admin adds, disables, enables and removes
users; a user sets a console password (the current one needed once set)."""

from __future__ import annotations

import json

import httpx
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer


def test_a_tenant_admin_manages_users_from_the_cli(
    platform: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    runner = CliRunner()
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
    added = runner.invoke(app, ["user", "add", "New.Hire@Example.com", "--name", "New Hire",
                                "--json"], env=env)
    assert added.exit_code == 0, added.output
    hire = json.loads(added.output)
    assert hire["email"] == "new.hire@example.com" and hire["role"] == "member"
    token = accounts.issue_token(platform, tenant.principal, "hire", hire["id"], 7).secret()

    # the new user sets a first password (none yet: no current one needed), then changes it
    mine = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": token}
    first = runner.invoke(app, ["password"], env=mine,
                          input="\na first passphrase\na first passphrase\n")
    assert first.exit_code == 0, first.output
    refused = runner.invoke(app, ["password"], env=mine,
                            input="wrong guess here\nanother passphrase\nanother passphrase\n")
    assert refused.exit_code == 1 and "current password" in refused.output

    disabled = runner.invoke(app, ["user", "disable", hire["id"]], env=env)
    assert disabled.exit_code == 0 and "disabled" in disabled.output
    gone = runner.invoke(app, ["users"], env=mine)
    assert gone.exit_code == 1 and "401" in gone.output  # its token ended with it
    listed = runner.invoke(app, ["users", "--json"], env=env)
    assert [u["email"] for u in json.loads(listed.output)
            if u["disabled_at"]] == ["new.hire@example.com"]
    assert runner.invoke(app, ["user", "enable", hire["id"]], env=env).exit_code == 0
    removed = runner.invoke(app, ["user", "remove", hire["id"]], env=env)
    assert removed.exit_code == 0 and "removed" in removed.output
    listed = runner.invoke(app, ["users", "--json"], env=env)
    assert "new.hire@example.com" not in listed.output
    self_off = runner.invoke(app, ["user", "disable", tenant.principal.user_id], env=env)
    assert self_off.exit_code == 1 and "yourself" in self_off.output


def test_users_tokens_and_images_come_a_page_at_a_time(
    platform: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    for n in range(3):
        accounts.issue_token(platform, tenant.principal, f"ci-{n}", None, 7)
    headers = {"Authorization": f"Bearer {tenant.token}"}
    for path, total in (("/api/v1/tokens", 4), ("/api/v1/users", 1), ("/api/v1/images", None)):
        whole = httpx.get(f"{server.url}{path}", headers=headers).json()
        assert whole["total"] == (total if total is not None else len(whole["items"]))
        page = httpx.get(f"{server.url}{path}", headers=headers, params={"limit": 2,
                                                                        "offset": 1}).json()
        assert page == {"items": whole["items"][1:3], "total": whole["total"], "limit": 2,
                        "offset": 1}
    # The CLI reads every page.
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
    tokens = CliRunner().invoke(app, ["tokens", "--json"], env=env)
    assert tokens.exit_code == 0 and len(json.loads(tokens.output)) == 4
