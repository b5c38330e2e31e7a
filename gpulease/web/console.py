"""The web console under /console: server-rendered pages over the same services as the API.

A tenant signs in with e-mail and password (the session is a 12-hour API token in an
HttpOnly, SameSite=Strict cookie), sees the catalog with live stock, orders, watches the
delivery stage by stage (a small script of this origin follows the instance's server-sent
events and reloads the page when it changes; the page also refreshes itself every 5 s
until the instance settles, whatever happens to the stream) and then its
GPUs' telemetry and hardware alerts, reveals the root password once, releases, and sees
the wallet, the ledger and the invoices (PDF). Operators see the fleet. Forms post only
from this origin. No CDN; the one script is progressive enhancement.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from gpulease.api.access import EVERY_USER, ORDERING, Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.api.streams import follow_instance
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import DomainError, InvalidInput, TooManyRequests, Unauthorized
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.schemas import InstanceView
from gpulease.schemas.fleet import NodeFilter
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import password_resets, users
from gpulease.services.agents import evidence
from gpulease.services.fleet import inventory
from gpulease.services.instances import actions, power
from gpulease.services.instances import views as instances
from gpulease.services.money import instance_cost, leases, wallet
from gpulease.services.money.invoices import documents as invoice_documents
from gpulease.services.money.invoices import views as invoices
from gpulease.services.storage import backup_policy
from gpulease.services.telemetry import idle, pushes
from gpulease.services.telemetry import series as telemetry_series
from gpulease.web import (
    account_pages,
    advise_page,
    billing_pages,
    i18n,
    money_pages,
    node_pages,
    records_pages,
    tenant_pages,
    ticket_pages,
)
from gpulease.web.money_pages import catalog_page
from gpulease.web.pages import (
    COOKIE,
    HERE,
    SETTLED,
    SameOrigin,
    SignInNeeded,
    Who,
    _,
    locale_of,
    page,
    page_context,
    said,
)

FLEET_PAGE = 500  # nodes on the operator's page; the API pages through the rest
router = APIRouter(prefix="/console", include_in_schema=False,
                   dependencies=[Depends(page_context)])
static = StaticFiles(directory=HERE / "static")
_page = page


class CompressedConsole:
    """gzip for the console's pages, scripts and chart data (a day of telemetry and the
    chart library are text that shrinks to a fraction); the API and the boot media (which
    BMCs fetch by byte range) pass as they are, and event streams are never buffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=1024)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/console"):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_middleware(CompressedConsole)
    app.include_router(router)
    app.include_router(money_pages.router)
    app.include_router(advise_page.router)
    app.include_router(account_pages.router)
    app.include_router(tenant_pages.router)
    app.include_router(ticket_pages.router)
    app.include_router(node_pages.router)
    app.include_router(records_pages.router)
    app.include_router(billing_pages.router)
    app.state.console_page_for = not_found_page  # unknown console URLs: a page, not JSON
    app.mount("/console/static", static, name="console-static")
    # ECharts, fetched from npm by `make vendor` (the charts are left out without it)
    app.mount("/console/vendor", StaticFiles(directory=HERE / "vendor" / "echarts",
                                             check_dir=False), name="console-vendor")

    @app.exception_handler(SignInNeeded)
    async def _sign_in(_: Request, __: SignInNeeded) -> RedirectResponse:
        return RedirectResponse("/console/login", status_code=303)


def not_found_page(request: Request, status: int) -> HTMLResponse:
    """An unknown console address answers a page, not the API's JSON."""
    i18n.current.set(locale_of(request))
    text = (_("There is no such page in the console.") if status == 404
            else _("That page does not take this kind of request."))
    return _page("base.html", status, who=None,
                 error=i18n.gettext(text) + " " + i18n.gettext(
                     "Go to the console's start page: /console/"))


def _ctx(who: Principal, **extra: Any) -> dict[str, Any]:
    return {"who": who, **extra}


@router.get("/login", response_class=HTMLResponse, openapi_extra=access(Caller.ANYONE))
def login_form() -> HTMLResponse:
    return _page("login.html")


@router.post("/login", dependencies=[SameOrigin], openapi_extra=access(Caller.ANYONE))
def login(request: Request, p: PlatformDep, email: Annotated[str, Form()],
          password: Annotated[str, Form()]) -> Response:
    request.state.audit_target = {"email": email.strip().lower()[:254]}
    try:
        session = accounts.console_login(p, email, password,
                                         request.client.host if request.client else None)
    except (Unauthorized, TooManyRequests) as exc:
        return _page("login.html", exc.status, error=said(exc), email=email,
                     retry_after=getattr(exc, "retry_after_s", None))
    request.state.principal = accounts.authenticate(p, session.secret())  # for the trail
    done = RedirectResponse("/console/", status_code=303)
    if (chosen := users.locale_of(p, request.state.principal.user_id)) is not None:
        remember_locale(done, chosen)  # the user's setting, on any browser they sign in on
    done.set_cookie(COOKIE, session.secret(),
                    max_age=int(accounts.CONSOLE_SESSION.total_seconds()),
                    httponly=True, samesite="strict", secure=request.url.scheme == "https",
                    path="/console")
    return done


@router.get("/forgot", response_class=HTMLResponse, openapi_extra=access(Caller.ANYONE))
def forgot_form() -> HTMLResponse:
    return _page("forgot.html")


@router.post("/forgot", dependencies=[SameOrigin], openapi_extra=access(Caller.ANYONE))
def forgot(request: Request, p: PlatformDep, email: Annotated[str, Form(max_length=254)]
           ) -> HTMLResponse:
    """The same page whether or not the address has an account."""
    try:
        password_resets.request_reset(p, email, request.client.host if request.client else None)
    except DomainError as exc:
        return _page("forgot.html", exc.status, error=said(exc), email=email,
                     retry_after=getattr(exc, "retry_after_s", None))
    return _page("forgot.html", 202, sent=True, email=email)


@router.get("/reset", response_class=HTMLResponse, openapi_extra=access(Caller.ANYONE))
def reset_form(token: Annotated[str, Query(max_length=200)] = "") -> HTMLResponse:
    return _page("reset.html", token=token)


@router.post("/reset", dependencies=[SameOrigin], openapi_extra=access(Caller.ANYONE))
def reset(p: PlatformDep, token: Annotated[str, Form(max_length=200)],
          password: Annotated[str, Form(max_length=200)],
          again: Annotated[str, Form(max_length=200)]) -> HTMLResponse:
    try:
        if password != again:
            raise InvalidInput("again", "The two passwords differ; type the same one twice.")
        email = password_resets.complete_reset(p, token, password)
    except DomainError as exc:
        return _page("reset.html", exc.status, error=said(exc), token=token)
    return _page("login.html", notice="Your password is set; sign in with it.", email=email)


@router.post("/lang", dependencies=[SameOrigin], openapi_extra=access(Caller.ANYONE))
def switch_language(request: Request, p: PlatformDep, to: Annotated[str, Form(max_length=16)],
                    back: Annotated[str, Form(max_length=500)] = "/console/") -> Response:
    """The page's language switch: a cookie for this browser and, signed in, the user's
    setting (their mail follows it too). Back to the page it came from."""
    chosen = i18n.known(to) or i18n.choose(None, None, None)
    here = back if back.startswith("/console") and "//" not in back else "/console/"
    done = RedirectResponse(here, status_code=303)
    remember_locale(done, chosen)
    try:
        who = accounts.authenticate(p, request.cookies.get(COOKIE))
    except Unauthorized:
        return done
    if not who.is_meter:
        request.state.principal = who
        users.set_locale(p, who, chosen)
    return done


def remember_locale(response: Response, locale: str) -> None:
    response.set_cookie(i18n.COOKIE, locale, max_age=365 * 86400, samesite="lax",
                        path="/console")


@router.post("/logout", dependencies=[SameOrigin], openapi_extra=access(Caller.ANYONE))
def logout(request: Request, p: PlatformDep) -> Response:
    if token := request.cookies.get(COOKIE):
        accounts.console_logout(p, token)
    done = RedirectResponse("/console/login", status_code=303)
    done.delete_cookie(COOKIE, path="/console")
    return done


@router.get("/", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def home(p: PlatformDep, who: Who,
         filters: Annotated[dict[str, str | None], Depends(node_pages.fleet_filters)]
         ) -> HTMLResponse:
    listed = instances.list_instances(p, who, limit=100)
    busy = any(i.status not in SETTLED for i in listed.items)
    money = wallet.show_wallet(p, who) if not who.is_operator else None
    fleet, error = None, None
    if who.is_operator:
        try:
            fleet = inventory.list_nodes(p, who, NodeFilter(
                status=filters["status"], sku=filters["sku"], region=filters["region"]),
                limit=FLEET_PAGE)
        except DomainError as exc:  # an unknown status in the filter
            fleet, error = inventory.list_nodes(p, who, limit=FLEET_PAGE), said(exc)
    return _page("home.html", 422 if error else 200, **_ctx(
        who, instances=listed.items, total=listed.total, wallet=money, fleet=fleet,
        idle=None if who.is_operator else {v.instance_id: v for v in idle.tenant_idle(p, who)},
        filters=filters, offers=p.catalog.offers, error=error,
        refresh=2 if busy and not any(filters.values()) else None))


@router.get("/catalog", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def catalog_view(p: PlatformDep, who: Who) -> HTMLResponse:
    return catalog_page(p, who)


@router.get("/instances/{instance_id}", response_class=HTMLResponse,
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_page(instance_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        view = instances.show_instance(p, who, instance_id)
    except DomainError as exc:  # another tenant's, or none: said on a page, not as JSON
        return _page("base.html", exc.status, **_ctx(who, error=said(exc)))
    # One still on its way follows the instance's events (and refreshes every 5 s whatever
    # happens to the stream); a delivered one is not reloaded under the tenant's hands.
    ready = view.status == InstanceStatus.READY
    return _page("instance.html", **_ctx(
        who, inst=view, telemetry=pushes.instance_metrics(p, who, view.id) if ready else None,
        idle=idle.instance_idle(p, who, view.id) if ready else None,
        cost=instance_cost.cost_of(p, who, view.id),
        **_evidence(p, who, view), **_lease_card(p, who, view),
        follow=view.status not in SETTLED))


def _lease_card(p: Platform, who: Principal, inst: InstanceView) -> dict[str, Any]:
    """A delivered server's lease (its end, days left, grace, auto-renew) and its backups."""
    if inst.status != InstanceStatus.READY:
        return {}
    card: dict[str, Any] = {"backup": backup_policy.show(p, who, inst.id),
                            "power": power.power_actions(p, who, inst.id).items}
    if inst.kind != "container":
        lease = leases.show_lease(p, who, inst.id)
        left = (lease.ends_at - p.clock.now()).total_seconds() / 86400
        card |= {"lease": lease, "days_left": max(0.0, left)}
    return card


@router.get("/instances/{instance_id}/telemetry.json",
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_telemetry(instance_id: str, p: PlatformDep, who: Who,
                       hours: Annotated[int, Query()] = 1) -> Response:
    """The charts' data (the API's /instances/{id}/telemetry, for the console session)."""
    try:
        series = telemetry_series.instance_series(p, who, instance_id, hours)
    except DomainError as exc:
        return Response(said(exc), status_code=exc.status, media_type="text/plain")
    return Response(json.dumps(series, separators=(",", ":")), media_type="application/json",
                    headers={"Cache-Control": "no-store"})


@router.get("/instances/{instance_id}/erase-certificates.json",
            openapi_extra=access(*EVERY_USER, owned=True))
def certificates_download(instance_id: str, p: PlatformDep, who: Who) -> Response:
    """The instance's erase certificates as one JSON file to keep (each with its digest,
    as the API gives them)."""
    try:
        items, total = evidence.instance_certificates(p, who, instance_id, limit=1000)
    except DomainError as exc:
        return _page("base.html", exc.status, **_ctx(who, error=said(exc)))
    body = json.dumps({"instance_id": instance_id, "total": total, "certificates": items},
                      default=str, indent=2, ensure_ascii=False)
    return Response(body, media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="{instance_id}-erase-certificates.json"'})


@router.get("/instances/{instance_id}/events", openapi_extra=access(*EVERY_USER, owned=True))
async def instance_events(instance_id: str, p: PlatformDep, who: Who, request: Request,
                          timeout: Annotated[float, Query(gt=0, le=3600)] = 1800) -> Response:
    """The delivery page's server-sent events (as the API's, for the console session)."""
    try:
        return await follow_instance(p, who, request, instance_id, ",".join(SETTLED),
                                     timeout)
    except DomainError as exc:
        return Response(said(exc), status_code=exc.status, media_type="text/plain")


def _evidence(p: Platform, who: Principal, inst: InstanceView) -> dict[str, Any]:
    """What the tenant is handed as proof: the acceptance reports that gated delivery, and
    one erase certificate per disk once it is handed back (each read only when there can
    be any: a delivering page reloads every 2 s)."""
    ending = inst.status in (InstanceStatus.RELEASING, InstanceStatus.RELEASED,
                             InstanceStatus.FAILED)
    return {"acceptance": evidence.acceptance_reports(p, who, inst.id)
            if inst.status != InstanceStatus.PENDING else [],
            "certificates": evidence.instance_certificates(p, who, inst.id)[0] if ending else []}


@router.post("/instances/{instance_id}/credentials", dependencies=[SameOrigin],
             openapi_extra=access(*ORDERING, owned=True))
def reveal(instance_id: str, p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        creds = actions.reveal_credentials(p, who, instance_id)
    except DomainError as exc:
        return _refused(p, who, instance_id, exc)
    view = instances.show_instance(p, who, instance_id)
    return _page("instance.html", **_ctx(who, inst=view, credentials=creds,
                                         **_lease_card(p, who, view),
                                         **_evidence(p, who, view)))


@router.post("/instances/{instance_id}/power", dependencies=[SameOrigin],
             openapi_extra=access(*ORDERING, owned=True))
def power_action(instance_id: str, p: PlatformDep, who: Who,
                 action: Annotated[str, Form(max_length=16)],
                 node: Annotated[str, Form(max_length=64)] = "",
                 confirmed: Annotated[bool, Form()] = False) -> Response:
    """A reboot, power cycle or restart, sent once the box saying what it does is ticked;
    the page then shows it queued, and done once each server took it."""
    try:
        if not confirmed:
            raise InvalidInput("confirmed", "Tick the box that says what this does, then "
                               "send it again.")
        power.request_power(p, who, instance_id, action, node or None)
    except DomainError as exc:
        return _refused(p, who, instance_id, exc)
    return RedirectResponse(f"/console/instances/{instance_id}#power", status_code=303)


def _refused(p: Platform, who: Principal, instance_id: str, exc: DomainError) -> HTMLResponse:
    """An action on an instance page was refused: the page again with why, or only why
    when the instance is not the caller's to see."""
    try:
        view = instances.show_instance(p, who, instance_id)
    except DomainError:
        return _page("base.html", exc.status, **_ctx(who, error=said(exc)))
    return _page("instance.html", exc.status,
                 **_ctx(who, inst=view, error=said(exc), **_lease_card(p, who, view),
                        **_evidence(p, who, view)))


@router.get("/billing", response_class=HTMLResponse, openapi_extra=access(*EVERY_USER))
def billing(p: PlatformDep, who: Who) -> HTMLResponse:
    money = wallet.show_wallet(p, who) if not who.is_operator else None
    entries = wallet.ledger(p, who, limit=50).items if not who.is_operator else []
    bills = invoices.list_invoices(p, who, limit=50).items
    return _page("billing.html", **_ctx(who, wallet=money, ledger=entries, invoices=bills))


@router.get("/invoices/{invoice_id}.pdf", openapi_extra=access(*EVERY_USER, owned=True))
def invoice_pdf(invoice_id: str, p: PlatformDep, who: Who) -> Response:
    try:
        inv = invoices.show_invoice(p, who, invoice_id)
    except DomainError as exc:
        return _page("base.html", exc.status, **_ctx(who, error=said(exc)))
    pdf = invoice_documents.render_pdf(inv, p.settings.invoice_issuer,
                                       p.settings.invoice_issuer_tax_id)
    return Response(pdf, media_type="application/pdf", headers={
        "Content-Disposition": f'inline; filename="{inv.number or inv.id}.pdf"'})
