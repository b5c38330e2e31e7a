"""Accounts a tenant admin manages: e-mail is one account whatever its case, users are
disabled and removed with their tokens and sessions ending at once, a password change needs
the current one and ends other sessions, tokens have a longest life. SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from gpulease.domain.accounts import Role
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.testing.callers import TenantCtx, new_tenant

PASSPHRASE = "correct horse battery staple"


def member(p: Platform, admin: TenantCtx, email: str, role: Role = Role.MEMBER
           ) -> tuple[str, str]:
    """A new user of the admin's tenant with a password; (user id, an API token)."""
    made = accounts.add_user(p, admin.principal, accounts.Person(email, "Someone", role,
                                                                 PASSPHRASE))
    token = accounts.issue_token(p, admin.principal, "ci", made.id, 30).secret()
    return made.id, token


def test_an_e_mail_is_one_account_whatever_its_case(platform: Platform, tenant: TenantCtx
                                                    ) -> None:
    other = new_tenant(platform)
    uid, _ = member(platform, tenant, "Alice.Smith@Example.COM")
    listed = {u.id: u.email for u in users.list_users(platform, tenant.principal).items}
    assert listed[uid] == "alice.smith@example.com"
    with pytest.raises(Conflict, match="cannot be used for a new user here") as taken:
        accounts.add_user(platform, other.principal, accounts.Person("ALICE.SMITH@example.com",
                                                                     "Eve", Role.MEMBER, None))
    assert "alice" not in str(taken.value).lower()  # another tenant's: not named
    with pytest.raises(Conflict, match="exists already"):  # one's own tenant's: named
        accounts.add_user(platform, tenant.principal, accounts.Person("alice.smith@example.com",
                                                                      "Al", Role.MEMBER, None))
    session = accounts.console_login(platform, " ALICE.smith@EXAMPLE.com ", PASSPHRASE)
    assert accounts.authenticate(platform, session.secret()).user_id == uid


def test_a_disabled_user_is_out_at_once_and_back_when_enabled(
    platform: Platform, tenant: TenantCtx
) -> None:
    uid, token = member(platform, tenant, "bob@example.com")
    session = accounts.console_login(platform, "bob@example.com", PASSPHRASE).secret()
    assert users.disable_user(platform, tenant.principal, uid).disabled_at is not None
    for credential in (token, session):
        with pytest.raises(Unauthorized):
            accounts.authenticate(platform, credential)
    with pytest.raises(Unauthorized, match="Wrong e-mail or password|disabled"):
        accounts.console_login(platform, "bob@example.com", PASSPHRASE)
    assert users.enable_user(platform, tenant.principal, uid).disabled_at is None
    with pytest.raises(Unauthorized, match="revoked"):
        accounts.authenticate(platform, token)  # the old tokens stay ended
    fresh = accounts.console_login(platform, "bob@example.com", PASSPHRASE).secret()
    assert accounts.authenticate(platform, fresh).user_id == uid


def test_who_may_disable_and_remove_whom(platform: Platform, tenant: TenantCtx,
                                         operator: TenantCtx) -> None:
    uid, token = member(platform, tenant, "carol@example.com")
    stranger = new_tenant(platform)
    with pytest.raises(NotFound):  # another tenant's user does not exist for you
        users.disable_user(platform, stranger.principal, uid)
    plain = accounts.authenticate(platform, token)
    with pytest.raises(Forbidden, match="tenant admin"):
        users.disable_user(platform, plain, tenant.principal.user_id)
    with pytest.raises(Forbidden, match="yourself"):
        users.disable_user(platform, tenant.principal, tenant.principal.user_id)
    with pytest.raises(Conflict, match="last active admin"):  # the operator cannot orphan it
        users.disable_user(platform, operator.principal, tenant.principal.user_id)
    assert users.disable_user(platform, operator.principal, uid).disabled_at is not None


def test_a_removed_user_is_gone_and_their_address_is_free(
    platform: Platform, tenant: TenantCtx
) -> None:
    uid, token = member(platform, tenant, "dave@example.com")
    users.remove_user(platform, tenant.principal, uid)
    assert uid not in {u.id for u in users.list_users(platform, tenant.principal).items}
    with pytest.raises(Unauthorized):
        accounts.authenticate(platform, token)
    with pytest.raises(NotFound):
        users.enable_user(platform, tenant.principal, uid)
    again, _ = member(platform, tenant, "dave@example.com")  # the address is free again
    assert again != uid


def test_a_password_change_needs_the_current_one_and_ends_other_sessions(
    platform: Platform, tenant: TenantCtx
) -> None:
    uid, token = member(platform, tenant, "erin@example.com")
    here = accounts.console_login(platform, "erin@example.com", PASSPHRASE).secret()
    there = accounts.console_login(platform, "erin@example.com", PASSPHRASE).secret()
    me = accounts.authenticate(platform, here)
    with pytest.raises(Forbidden, match="current password"):
        users.change_password(platform, me, "a brand new passphrase", None)
    with pytest.raises(Forbidden, match="current password"):
        users.change_password(platform, me, "a brand new passphrase", "not it at all")
    users.change_password(platform, me, "a brand new passphrase", PASSPHRASE)
    assert accounts.authenticate(platform, here).user_id == uid  # this session stays
    assert accounts.authenticate(platform, token).user_id == uid  # API tokens stay
    with pytest.raises(Unauthorized, match="revoked"):
        accounts.authenticate(platform, there)  # the other session ended
    with pytest.raises(Unauthorized):
        accounts.console_login(platform, "erin@example.com", PASSPHRASE)
    accounts.console_login(platform, "erin@example.com", "a brand new passphrase")


def test_tokens_have_a_longest_life(platform: Platform, tenant: TenantCtx) -> None:
    cap = platform.settings.token_max_days
    with pytest.raises(InvalidInput, match="never expires"):
        accounts.issue_token(platform, tenant.principal, "forever", None, None)
    with pytest.raises(InvalidInput, match=f"at most {cap} days"):
        accounts.issue_token(platform, tenant.principal, "long", None, cap + 1)
    made = accounts.issue_token(platform, tenant.principal, "ok", None, cap)
    assert made.expires_at is not None
    _, op_token = accounts.create_operator(platform, "ops2@example.com", "Ops")
    assert op_token.expires_at is not None  # no token lives forever unless allowed
    platform.settings.allow_unexpiring_tokens = True
    assert accounts.issue_token(platform, tenant.principal, "forever", None,
                                None).expires_at is None
