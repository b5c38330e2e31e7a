"""What every console page shares: the templates in the request's language (web/i18n.py),
the signed-in caller, the same-origin check on forms, and the words a tenant reads for the
platform's internal names (delivery steps as "installing the OS, 4 of 7", not
`wait_agent`; statuses in the page's language)."""

from __future__ import annotations

import secrets
from contextvars import ContextVar
from functools import cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Form, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError

from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError, Unauthorized
from gpulease.domain.fleet.steps import step_words
from gpulease.domain.locales import DEFAULT
from gpulease.domain.phrases import said_stored
from gpulease.schemas.field_errors import field_error
from gpulease.services.accounts import identity as accounts
from gpulease.web import i18n

HERE = Path(__file__).resolve().parent
COOKIE = "gpulease_session"
SETTLED = {"ready", "failed", "released"}

def _(message: str) -> str:
    """Marks a message for the catalog (extracted by `make messages`); translated where it
    is shown."""
    return message


# Statuses and kinds shown on pages, so the catalog holds them (the data keeps its codes).
SHOWN_WORDS = (_("pending"), _("deploying"), _("ready"), _("releasing"), _("released"),
               _("failed"), _("available"), _("allocated"), _("active"), _("cleaning"),
               _("maintenance"), _("in repair"), _("retired"), _("grace"), _("ended"),
               _("draft"), _("final"), _("issued"), _("paid"), _("void"), _("ordered"),
               _("replacing"), _("in_repair"), _("bare_metal"), _("cluster"),
               _("container"), _("month"), _("day"), _("year"), _("hour"), _("hold"),
               _("charge"), _("topup"), _("refund"), _("release"), _("usage"),
               _("inference"), _("lora"), _("qlora"), _("full-finetune"), _("pretrain"),
               _("admin"), _("member"), _("reader"), _("meter"), _("suspended"), _("closed"),
               _("open"), _("acknowledged"), _("mitigated"), _("resolved"), _("response"),
               _("mitigation"), _("resolution"), _("enrolling"), _("deleted"),
               _("hold_release"), _("credit"), _("credit_note"), _("payout"),
               _("console session"), _("delivery"), _("on_demand"), _("burn_in"),
               _("repair"), _("ok"), _("FAIL"), _("skip"), _("idle"), _("stage"),
               _("status"), _("result"), _("note"), _("error"), _("queued"), _("done"),
               _("reboot"), _("power_cycle"), _("restart"))


# Refusals the console shows as they are (no figures in them): the page's error line
# looks each up in the catalog; another shows as the service wrote it (English).
KNOWN_ERRORS = (
    _("Wrong e-mail or password. Ask your tenant admin to set one."),
    _("This user is disabled; ask your tenant admin."),
    _("This needs an operator token; ask your provider's operations team."),
    _("Only a tenant admin can manage users and tokens."),
    _("Role 'reader' may only read; ask a tenant admin for a member token."),
    _("Operators do not own instances; use a tenant user's token to order or release."),
    _("There is no such offer in the catalog; pick one below."),
    _("The two passwords differ; type the same one twice."),
)


@cache
def environment(locale: str) -> Environment:
    """The templates in one language: gettext from its catalog, numbers, money and dates
    written its way."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html"]), extensions=["jinja2.ext.i18n"])
    t = i18n.translations(locale)
    env.install_gettext_translations(t, newstyle=True)  # type: ignore[attr-defined]
    env.filters["num"] = lambda v: i18n.number(v, locale)
    env.filters["yuan"] = lambda v: i18n.money(v, locale)
    env.filters["when"] = lambda v: i18n.moment(v, locale)
    env.filters["when_s"] = lambda v: i18n.moment(v, locale, seconds=True)
    env.filters["step"] = lambda v: step_words(v, t.gettext)
    env.filters["word"] = lambda v: t.gettext(v) if v else ""
    env.filters["said"] = lambda text, phrased=None: said_stored(text or "", phrased,
                                                                 t.gettext)
    env.globals |= {"lang_tag": locale.replace("_", "-"), "locale": locale,
                    "languages": i18n.NAMES}
    return env


def said(exc: DomainError) -> str:
    """A service's refusal in the page's language."""
    return exc.said(i18n.translations(i18n.current.get()).gettext)


def refusal(exc: DomainError | ValidationError) -> tuple[int, str]:
    """(status, sentence) of a refused form: the service's own (in the page's language), or
    the first field the request model refused (422)."""
    if isinstance(exc, DomainError):
        return exc.status, said(exc)
    locale = i18n.current.get()
    return 422, field_error(exc.errors()[0], None if locale == DEFAULT else
                            i18n.translations(locale).gettext, request=False)


# A form's one-time key (orders', renewals' reviews, the token form): its submission acts
# once however often it is sent (the back button, F5, a second tab), through the
# idempotency store under the key `once_key` makes of it.
Once = Annotated[str | None, Form(max_length=64, pattern=r"^[A-Za-z0-9_-]*$")]


def new_once() -> str:
    return secrets.token_urlsafe(18)


def once_key(once: str | None) -> str | None:
    return f"console:{once}" if once else None


class SignInNeeded(Exception):
    """No valid session: the handler sends the browser to the sign-in page."""


def page(name: str, status: int = 200, *, retry_after: int | None = None,
         **context: Any) -> HTMLResponse:
    """A template rendered in the current request's language (page_context), with who is
    signed in. A 429 always says when to retry (`retry_after` seconds, else a minute)."""
    env = environment(i18n.current.get())
    context.setdefault("here", _PATH.get())
    context.setdefault("back_to", _BACK.get())
    who = context.get("who")
    if who is not None:
        context.setdefault("email", _EMAILS.get(who.user_id, ""))
    answer = HTMLResponse(env.get_template(name).render(**context), status_code=status)
    if status == 429:
        answer.headers["Retry-After"] = str(retry_after or 60)
    return answer


# A signed-in user's e-mail for the header, read once per user and process (an account's
# address does not change; a removed one can no longer sign in).
_EMAILS: dict[str, str] = {}


def locale_of(request: Request) -> str:
    return i18n.choose(request.cookies.get(i18n.COOKIE), None,
                       request.headers.get("accept-language"))


_PATH: ContextVar[str] = ContextVar("gpulease_console_path", default="")
_BACK: ContextVar[str] = ContextVar("gpulease_console_back", default="/console/")


async def page_context(request: Request) -> None:
    """Every console route's first dependency: the language its page is written in and
    the page's own address (the menu marks it; the language switch comes back to it). An
    async dependency, so that the page's thread sees them."""
    i18n.current.set(locale_of(request))
    back = request.url.path
    if request.method == "GET" and request.url.query:
        back += "?" + request.url.query
    _PATH.set(request.url.path)
    _BACK.set(back if request.method == "GET" else "/console/")


def _who(request: Request, p: PlatformDep) -> Principal:
    try:
        principal = accounts.authenticate(p, request.cookies.get(COOKIE))
    except Unauthorized:
        raise SignInNeeded() from None
    if principal.is_meter:  # a meter's token is no console session
        raise SignInNeeded()
    request.state.principal = principal  # for the audit trail
    if principal.user_id not in _EMAILS:
        if len(_EMAILS) > 10_000:
            _EMAILS.clear()
        _EMAILS[principal.user_id] = accounts.email_of(p, principal.user_id)
    return principal


def _same_origin(request: Request) -> None:
    """Forms post only from the console's own pages (with the SameSite cookie, against
    cross-site request forgery): the address the request reached, or the console's public
    origins (GPULEASE_CONSOLE_ORIGINS, else GPULEASE_PUBLIC_URL) when a proxy rewrote
    Host on the way."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return
    settings = request.app.state.platform.settings
    allowed = {request.url.netloc} | {urlsplit(o).netloc for o in (
        settings.console_origins or [settings.public_url])}
    if urlsplit(source).netloc not in allowed:
        raise Unauthorized("That form came from another site; use the console's own pages "
                           "(behind a proxy that rewrites Host, set GPULEASE_CONSOLE_ORIGINS).")


Who = Annotated[Principal, Depends(_who)]
SameOrigin = Depends(_same_origin)
