"""Callers of each role: a tenant (its admin, with money in its wallet), an operator, a
tenant's member or reader; their bearer headers; an SSH key to order with."""

from __future__ import annotations

import uuid
from decimal import Decimal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpulease.domain.accounts import Principal, Role
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.money import wallet


class TenantCtx:
    """Who calls: the principal the services are given, its bearer token, its tenant
    ("" for an operator)."""

    def __init__(self, principal: Principal, token: str, tenant_id: str) -> None:
        self.principal, self.token, self.tenant_id = principal, token, tenant_id


def fund(p: Platform, tenant_id: str, amount: str = "100000000", reference: str = "") -> None:
    """Put money in a tenant's wallet (an operator's top-up), so orders can hold it."""
    operator = Principal(user_id="test-operator", tenant_id=None, role=Role.OPERATOR)
    wallet.top_up(p, operator, tenant_id, Decimal(amount),
                  reference or f"test funding {tenant_id}")


def new_tenant(p: Platform, name: str | None = None, funds: str = "100000000") -> TenantCtx:
    """A tenant with its admin (the caller) and `funds` in its wallet."""
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    created = accounts.create_tenant(p, name, accounts.Person(f"{name}@example.com", "Admin"))
    fund(p, created.tenant.id, funds)
    token = created.token.secret()
    return TenantCtx(accounts.authenticate(p, token), token, created.tenant.id)


def new_operator(p: Platform) -> TenantCtx:
    _, made = accounts.create_operator(p, f"op-{uuid.uuid4().hex[:6]}@example.com", "Op")
    token = made.secret()
    return TenantCtx(accounts.authenticate(p, token), token, "")


def new_user(p: Platform, admin: TenantCtx, role: Role) -> TenantCtx:
    """A member or reader of the admin's tenant, with a token of its own."""
    email = f"{role.value}-{uuid.uuid4().hex[:6]}@example.com"
    user = accounts.add_user(p, admin.principal, accounts.Person(email, role.value.title(), role,
                                                                 None))
    token = accounts.issue_token(p, admin.principal, "test", user.id, 30).secret()
    return TenantCtx(accounts.authenticate(p, token), token, admin.tenant_id)


def auth(token: str) -> dict[str, str]:
    """A bearer token's header."""
    return {"Authorization": f"Bearer {token}"}


def ssh_key(comment: str = "test") -> str:
    """A fresh ed25519 public key in OpenSSH's form."""
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    blob = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{blob.decode()} {comment}"
