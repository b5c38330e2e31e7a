from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpulease.api.access import EVERY_USER, Caller, access
from gpulease.api.deps import IdempotencyKey, Limit, Offset, PlatformDep, PrincipalDep
from gpulease.domain.accounts import Role
from gpulease.schemas import (
    LocaleSet,
    MeterCreate,
    MeterCreated,
    Page,
    PasswordResetAsk,
    PasswordResetComplete,
    PasswordSet,
    TenantCreate,
    TenantCreated,
    TokenCreate,
    TokenCreated,
    TokenView,
    UserCreate,
    UserView,
)
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import password_resets, users
from gpulease.services.platform.idempotency import idem_for

router = APIRouter(tags=["accounts"])


@router.get("/me", openapi_extra=access(*EVERY_USER))
def me(actor: PrincipalDep) -> dict[str, str | None]:
    return {"user_id": actor.user_id, "role": actor.role.value, "tenant_id": actor.tenant_id}


@router.put("/me/password", status_code=204, openapi_extra=access(*EVERY_USER))
def set_password(body: PasswordSet, p: PlatformDep, actor: PrincipalDep) -> None:
    """Set your own password for the web console (/console). Once one is set, give the
    current one too; your other console sessions end."""
    users.change_password(p, actor, body.password, body.current_password)


@router.put("/me/locale", response_model=UserView, openapi_extra=access(*EVERY_USER))
def set_locale(body: LocaleSet, p: PlatformDep, actor: PrincipalDep) -> UserView:
    """Your language for the web console and the mail sent to you (zh_CN or en); null
    follows the browser."""
    return users.set_locale(p, actor, body.locale)


@router.post("/password-resets", status_code=202, openapi_extra=access(Caller.ANYONE))
def ask_password_reset(body: PasswordResetAsk, request: Request, p: PlatformDep
                       ) -> dict[str, str]:
    """Mail a link that sets the account's console password (a new user's first one, or a
    forgotten one): it works once, for 30 minutes. The same answer whether or not the
    address has an account; 409 when the platform sends no e-mail."""
    password_resets.request_reset(p, body.email, request.client.host if request.client
                                  else None)
    return {"detail": "If that address has an account, a link to set its password is on "
                      "its way; it works once, for 30 minutes."}


@router.post("/password-resets/complete", status_code=204,
             openapi_extra=access(Caller.ANYONE))
def complete_password_reset(body: PasswordResetComplete, p: PlatformDep) -> None:
    """Set the password with the link's token (`rst_…`); the user's console sessions end."""
    password_resets.complete_reset(p, body.token, body.password)


@router.get("/users", response_model=Page[UserView],
            openapi_extra=access(Caller.ADMIN, Caller.OPERATOR))
def list_users(p: PlatformDep, actor: PrincipalDep, tenant: str | None = None,
               limit: Limit = 100, offset: Offset = 0) -> Page[UserView]:
    """Tenant admin: the tenant's users; operator: everyone's, or one tenant's (?tenant=);
    oldest first, a page at a time."""
    return users.list_users(p, actor, tenant, limit, offset)


@router.post("/users/{user_id}/disable", response_model=UserView,
             openapi_extra=access(Caller.ADMIN, Caller.OPERATOR, owned=True))
def disable_user(user_id: str, p: PlatformDep, actor: PrincipalDep) -> UserView:
    """Tenant admin: the user can no longer sign in; their tokens and sessions end now."""
    return users.disable_user(p, actor, user_id)


@router.post("/users/{user_id}/enable", response_model=UserView,
             openapi_extra=access(Caller.ADMIN, Caller.OPERATOR, owned=True))
def enable_user(user_id: str, p: PlatformDep, actor: PrincipalDep) -> UserView:
    """Tenant admin: a disabled user may sign in again (with new tokens)."""
    return users.enable_user(p, actor, user_id)


@router.delete("/users/{user_id}", status_code=204,
               openapi_extra=access(Caller.ADMIN, Caller.OPERATOR, owned=True))
def remove_user(user_id: str, p: PlatformDep, actor: PrincipalDep) -> None:
    """Tenant admin: the user is gone (kept for the record); their e-mail is free again."""
    users.remove_user(p, actor, user_id)


@router.post("/tenants", response_model=TenantCreated, status_code=201,
             openapi_extra=access(Caller.OPERATOR))
def create_tenant(body: TenantCreate, p: PlatformDep, actor: PrincipalDep, response: Response,
                  key: IdempotencyKey = None) -> TenantCreated:
    """Operator: a new tenant with its first admin and that admin's token (shown once: a
    replay with the same Idempotency-Key answers without it)."""
    actor.require_operator()
    created = accounts.create_tenant(p, body.name, accounts.Person(body.admin_email,
                                                                   body.admin_name),
                                     actor=actor, idem=idem_for(key, "tenant", body))
    if created.token.token is None:
        response.headers["Idempotent-Replayed"] = "true"
    return created


@router.post("/meters", response_model=MeterCreated, status_code=201,
             openapi_extra=access(Caller.OPERATOR))
def create_meter(body: MeterCreate, p: PlatformDep, actor: PrincipalDep, response: Response,
                 key: IdempotencyKey = None) -> MeterCreated:
    """Operator: an account for a metering source (network collector, storage) with its
    token (shown once). The token may only post usage (POST /api/v1/usage); disable or
    remove the meter like a user (POST /api/v1/users/{id}/disable) to end it."""
    created = accounts.create_meter(p, actor, body.name, body.expires_in_days,
                                    idem_for(key, "meter", body))
    if created.token.token is None:
        response.headers["Idempotent-Replayed"] = "true"
    return created


@router.post("/users", response_model=UserView, status_code=201, openapi_extra=access(Caller.ADMIN))
def create_user(body: UserCreate, p: PlatformDep, actor: PrincipalDep,
                key: IdempotencyKey = None) -> UserView:
    """Tenant admin: add a user (admin, member or reader) to the tenant."""
    return accounts.add_user(p, actor, accounts.Person(body.email, body.name, Role(body.role),
                                                       body.password),
                             idem_for(key, "user", body))


@router.get("/tokens", response_model=Page[TokenView], openapi_extra=access(*EVERY_USER))
def list_tokens(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
                ) -> Page[TokenView]:
    """Your tokens (a tenant admin: the tenant's; an operator: all), console sessions
    included, oldest first, a page at a time."""
    return accounts.list_tokens(p, actor, limit, offset)


@router.post("/tokens", response_model=TokenCreated, status_code=201,
             openapi_extra=access(*EVERY_USER))
def create_token(body: TokenCreate, p: PlatformDep, actor: PrincipalDep, response: Response,
                 key: IdempotencyKey = None) -> TokenCreated:
    """A new API token; its secret is in this answer only (a replay with the same
    Idempotency-Key answers without it)."""
    created = accounts.issue_token(p, actor, body.name, body.user_id, body.expires_in_days,
                                   idem_for(key, "token", body))
    if created.token is None:
        response.headers["Idempotent-Replayed"] = "true"
    return created


@router.delete("/tokens/{token_id}", response_model=TokenView,
               openapi_extra=access(*EVERY_USER, owned=True))
def revoke_token(token_id: str, p: PlatformDep, actor: PrincipalDep) -> TokenView:
    return accounts.revoke_token(p, actor, token_id)
