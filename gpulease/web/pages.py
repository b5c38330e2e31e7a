"""What every console page shares: the templates, the signed-in caller, the same-origin
check on forms, and the words a tenant reads for the platform's internal names (delivery
steps as "installing the OS, 4 of 7", not `wait_agent`)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from gpulease.api.deps import PlatformDep
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Unauthorized
from gpulease.domain.states import CLEAN_ORDER, DEPLOY_ORDER, RETURN_ORDER, NodeStage
from gpulease.services import accounts

HERE = Path(__file__).resolve().parent
COOKIE = "gpulease_session"
SETTLED = {"ready", "failed", "released"}

St = NodeStage
# Each pipeline step as the tenant reads it; the count is its place in its pipeline.
STEP_WORDS: dict[str, str] = {
    St.POWER_OFF: "powering the server off",
    St.ATTACH_MEDIA: "attaching the OS image",
    St.POWER_ON: "starting the installer",
    St.WAIT_AGENT: "installing the OS",
    St.CONFIGURE: "setting up the data disk and your SSH keys",
    St.VERIFY: "running the acceptance tests",
    St.DETACH_MEDIA: "handing over",
    St.CLEAN_SHUTDOWN: "powering the server off",
    St.CLEAN_ATTACH_MEDIA: "attaching the erase system",
    St.CLEAN_POWER_ON: "starting the erase system",
    St.CLEAN_WAIT_AGENT: "waiting for the erase system",
    St.ERASE: "erasing the disks",
    St.BURN_IN: "burn-in tests after a repair",
    St.CLEAN_POWER_OFF: "powering off; back to the pool",
    St.RETURN_POWER_ON: "starting your system after the repair",
    St.RETURN_WAIT_AGENT: "waiting for your system",
    St.RETURN_VERIFY: "acceptance tests after the repair",
}
_PLACE = {stage.value: (i + 1, len(order))
          for order in (DEPLOY_ORDER, CLEAN_ORDER, RETURN_ORDER)
          for i, stage in enumerate(order)}


def step_words(stage: str | None) -> str:
    """A node's pipeline stage as the tenant reads it: "installing the OS, 4 of 7"; other
    stages (an instance's `deploying`) as their name with spaces."""
    if not stage:
        return ""
    words = STEP_WORDS.get(stage)
    if words is None:
        return stage.replace("_", " ")
    at, of = _PLACE[stage]
    return f"{words}, {at} of {of}"


def yuan(value: Decimal | float | str | None) -> str:
    return "—" if value is None else f"¥{Decimal(value):,.2f}"


def when(value: datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return "—" if value is None else f"{value:{fmt}} UTC"


templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                        autoescape=select_autoescape(["html"]))
templates.filters["num"] = lambda v: "—" if v is None else f"{v:,.0f}"
templates.filters["step"] = step_words
templates.filters["yuan"] = yuan
templates.filters["when"] = when


class SignInNeeded(Exception):
    """No valid session: the handler sends the browser to the sign-in page."""


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(templates.get_template(name).render(**context), status_code=status)


def _who(request: Request, p: PlatformDep) -> Principal:
    try:
        principal = accounts.authenticate(p, request.cookies.get(COOKIE))
    except Unauthorized:
        raise SignInNeeded() from None
    if principal.is_meter:  # a meter's token is no console session
        raise SignInNeeded()
    request.state.principal = principal  # for the audit trail
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
