"""The account in the console: who you are and your language, your password, your API
tokens (a new one shown once), and for a tenant admin the team (add a user with a role,
disable or enable one) and the webhook that receives lease reminders (its signing secret
shown once). Each form answers on the same page, with what happened or why not."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from gpulease.api.access import EVERY_USER, Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import DomainError, InvalidInput
from gpulease.platform import Platform
from gpulease.schemas import TokenCreate
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import quotas, users
from gpulease.services.money import budgets
from gpulease.services.platform import notify
from gpulease.services.platform.idempotency import idem_for
from gpulease.web import i18n
from gpulease.web.pages import (
    Once,
    SameOrigin,
    Who,
    _,
    new_once,
    once_key,
    page,
    page_context,
    refusal,
    said,
)

router = APIRouter(prefix="/console/account", include_in_schema=False,
                   dependencies=[Depends(page_context)])
ADMIN = Caller.ADMIN
Short = Annotated[str, Form(max_length=200)]


def account_page(p: Platform, who: Principal, status: int = 200, **extra: Any
                 ) -> HTMLResponse:
    admin = who.role is Role.ADMIN
    return page("account.html", status, who=who,
                tokens=[t for t in accounts.list_tokens(p, who, limit=200).items
                        if t.user_id == who.user_id and t.revoked_at is None],
                team=users.list_users(p, who, limit=200).items if admin else None,
                webhook=notify.webhook_of(p, who) if admin else None,
                budget=budgets.show_budget(p, who) if who.tenant_id else None,
                gpu_quotas=quotas.list_quotas(p, who) if who.tenant_id else None,
                my_locale=users.locale_of(p, who.user_id),
                once=new_once(), **extra)


def _answer(p: Platform, who: Principal, act: Any, done: str, **shown: Any) -> HTMLResponse:
    """Do `act`; the page again with `done` (translated) or with why not."""
    try:
        result = act()
    except DomainError as exc:
        return account_page(p, who, exc.status, error=said(exc))
    return account_page(p, who, notice=i18n.gettext(done),
                        **{k: v(result) for k, v in shown.items()})


@router.get("", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def account(p: PlatformDep, who: Who) -> HTMLResponse:
    return account_page(p, who)


@router.post("/password", dependencies=[SameOrigin], openapi_extra=access(*EVERY_USER))
def change_password(p: PlatformDep, who: Who, password: Short, again: Short,
                    current: Annotated[str | None, Form(max_length=200)] = None
                    ) -> HTMLResponse:
    def act() -> None:
        if password != again:
            raise InvalidInput("again", i18n.gettext(
                _("The two new passwords differ; type the same one twice.")))
        users.change_password(p, who, password, current or None)
    return _answer(p, who, act, _("Your password is changed; your other console sessions "
                                  "have ended."))


@router.post("/tokens", dependencies=[SameOrigin], openapi_extra=access(*EVERY_USER))
def create_token(p: PlatformDep, who: Who, name: Short,
                 days: Annotated[int, Form(ge=1, le=3650)] = 90,
                 once: Once = None) -> HTMLResponse:
    """One token per form: the form's one-time key makes F5 or the back button show that
    the token was made (its secret shown once), never mint a second one."""
    try:
        idem = idem_for(once_key(once), "token", TokenCreate(name=name,
                                                             expires_in_days=days))
        made = accounts.issue_token(p, who, name, None, days, idem)
    except (DomainError, ValidationError) as exc:
        status, why = refusal(exc)
        return account_page(p, who, status, error=why)
    if made.token is None:  # the same form again: made already, shown once then
        return account_page(p, who, notice=i18n.gettext(
            _("That form was sent already: the token was made then, and its secret was "
              "shown once. Revoke it below if it was not kept.")))
    return account_page(p, who, notice=i18n.gettext(
        _("A new API token: copy it now, it is not shown again.")), new_token=made)


@router.post("/tokens/{token_id}/revoke", dependencies=[SameOrigin],
             openapi_extra=access(*EVERY_USER, owned=True))
def revoke_token(token_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    return _answer(p, who, lambda: accounts.revoke_token(p, who, token_id),
                   _("The token is revoked: calls with it are refused from now on."))


@router.post("/users", dependencies=[SameOrigin], openapi_extra=access(ADMIN))
def add_user(p: PlatformDep, who: Who, email: Annotated[str, Form(max_length=254)],
             name: Short, role: Annotated[str, Form(max_length=16)],
             password: Annotated[str | None, Form(max_length=200)] = None) -> HTMLResponse:
    def act() -> object:
        who.require_tenant_admin()
        if role not in ("admin", "member", "reader"):
            raise InvalidInput("role", "No role {role!r}.", ["admin", "member", "reader"],
                               role=role)
        if password:
            users.check_new_password(password)
        return accounts.add_user(p, who, accounts.Person(email, name, Role(role), password or None))
    return _answer(p, who, act, _("The user is added. Without a password they set their "
                                  "own from the sign-in page (New user?)."))


@router.post("/users/{user_id}/disable", dependencies=[SameOrigin],
             openapi_extra=access(Caller.OPERATOR, ADMIN, owned=True))
def disable_user(user_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    """No more sign-ins; the user's tokens and console sessions end at once."""
    return _answer(p, who, lambda: users.disable_user(p, who, user_id),
                   _("Done: the team below shows it."))


@router.post("/users/{user_id}/enable", dependencies=[SameOrigin],
             openapi_extra=access(Caller.OPERATOR, ADMIN, owned=True))
def enable_user(user_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    return _answer(p, who, lambda: users.enable_user(p, who, user_id),
                   _("Done: the team below shows it."))


@router.post("/budget", dependencies=[SameOrigin], openapi_extra=access(ADMIN))
def set_budget(p: PlatformDep, who: Who, monthly_budget: Annotated[str, Form(max_length=20)]
               = "") -> HTMLResponse:
    def act() -> object:
        text = monthly_budget.strip().replace(",", "").replace("¥", "")
        if not text:
            return budgets.set_budget(p, who, None)
        try:
            amount = Decimal(text)
        except InvalidOperation:
            raise InvalidInput("monthly_budget", "Give the budget in yuan, such as 100000 "
                               "(empty: no budget).") from None
        if not amount.is_finite() or amount < 0 or amount >= 10**12:
            raise InvalidInput("monthly_budget", "Give the budget in yuan, such as 100000 "
                               "(empty: no budget).")
        return budgets.set_budget(p, who, amount)

    return _answer(p, who, act, _("Done: the budget above shows it."))


@router.post("/webhook", dependencies=[SameOrigin], openapi_extra=access(ADMIN))
def set_webhook(p: PlatformDep, who: Who, url: Annotated[str, Form(max_length=500)]
                ) -> HTMLResponse:
    return _answer(p, who, lambda: notify.set_webhook(p, who, url.strip()),
                   _("The webhook is set. Copy its signing secret now: it is not shown "
                     "again."),
                   webhook_secret=lambda made: made["secret"])


@router.post("/webhook/remove", dependencies=[SameOrigin], openapi_extra=access(ADMIN))
def remove_webhook(p: PlatformDep, who: Who) -> HTMLResponse:
    return _answer(p, who, lambda: notify.remove_webhook(p, who),
                   _("The webhook is removed: reminders go by e-mail only."))
