"""Errors as application/problem+json (RFC 9457) with a sentence that says what to do."""

from __future__ import annotations

import logging
from decimal import InvalidOperation
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gpulease.db.session import transient
from gpulease.domain.errors import (
    DomainError,
    InvalidInput,
    PaymentRequired,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from gpulease.domain.lifecycle import EntryRefused, InvalidTransition
from gpulease.domain.locales import DEFAULT, from_accept_language
from gpulease.schemas.field_errors import field_error, field_of
from gpulease.translations import N_, translations

log = logging.getLogger("gpulease.api")
PROBLEM = "application/problem+json"
RETRY_AFTER_S = 5


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def _said(request: Request, exc: DomainError) -> str:
    """The refusal in the language the client asks for (Accept-Language; English unless it
    names one the catalogs have)."""
    locale = from_accept_language(request.headers.get("accept-language"))
    if locale is None or locale == DEFAULT:
        return exc.detail
    return exc.said(translations(locale).gettext)


def install(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        extra: dict[str, Any] = {}
        if isinstance(exc, InvalidInput):
            extra = {"field": exc.field, "accepted": exc.accepted}
        elif isinstance(exc, PaymentRequired):
            extra = {"missing": f"{exc.missing:.2f}", "currency": "CNY"}
        response = problem(exc.status, exc.title, _said(request, exc), **extra)
        if isinstance(exc, Unauthorized):
            response.headers["WWW-Authenticate"] = 'Bearer realm="gpulease"'
        elif isinstance(exc, TooManyRequests | Unavailable):
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.exception_handler(InvalidTransition)
    async def _transition(_: Request, exc: InvalidTransition) -> JSONResponse:
        return problem(409, "Conflict", f"The {exc.machine} is {exc.current}; {exc.event!r} "
                       "does not apply from there. Check its status and retry.")

    @app.exception_handler(EntryRefused)
    async def _refused(_: Request, exc: EntryRefused) -> JSONResponse:
        return problem(409, "Conflict", f"The {exc.machine} cannot become {exc.target}: "
                       f"{exc.why}.")

    @app.exception_handler(DBAPIError)
    async def _database(_: Request, exc: DBAPIError) -> JSONResponse:
        if "cannot contain NUL" in str(exc.orig):  # PostgreSQL's text refuses U+0000
            return problem(422, "Invalid input", "Text cannot contain the NUL character "
                           "(U+0000); remove it and resend. Nothing was written.")
        if not transient(exc):
            log.error("database error", exc_info=exc)
            return problem(500, "Internal error",
                           "Something failed on our side; retry, and report it if it persists.")
        log.warning("database unavailable: %s", str(exc).splitlines()[0])
        response = problem(
            503, "Service Unavailable",
            f"The database was unreachable or busy; this request's transaction was rolled "
            f"back, so nothing of it was written. Retry in {RETRY_AFTER_S} s (an order with "
            "the same Idempotency-Key is placed at most once).", retry_after=RETRY_AFTER_S)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        locale = from_accept_language(request.headers.get("accept-language"))
        gettext = None if locale in (None, DEFAULT) else translations(locale).gettext
        fields = [field_of(err) for err in errors]
        parts = [field_error(err, gettext) for err in errors]
        lead = (gettext or str)(N_("Fix these fields and resend: {fields}.")).format(
            fields="; ".join(parts) if gettext is None else " ".join(parts))  # sentences
        return problem(
            422, "Invalid input", lead,
            field=fields[0] if fields else None, errors=[
                {"field": f, "message": e.get("msg")} for f, e in zip(fields, errors, strict=True)
            ],
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        page = getattr(request.app.state, "console_page_for", None)  # web/console.py's
        if page is not None and exc.status_code in (404, 405) and (
                request.url.path.startswith("/console")) and (
                exc.detail in ("Not Found", "Method Not Allowed")):
            return page(request, exc.status_code)  # type: ignore[no-any-return]
        detail = str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 404 and detail == "Not Found":
            detail = "No such endpoint; the API is under /api/v1 (see /api/v1/docs)."
        elif exc.status_code == 405:
            allowed = _allowed_methods(request) or headers.get("Allow", "")
            headers["Allow"] = allowed
            detail = ("This endpoint does not take that method"
                      + (f"; it takes {allowed}" if allowed else "") + ". See /api/v1/docs.")
        response = problem(exc.status_code, "HTTP error", detail)
        response.headers.update(headers)
        return response

    @app.exception_handler(InvalidOperation)
    @app.exception_handler(OverflowError)
    async def _number(_: Request, exc: Exception) -> JSONResponse:
        log.warning("a number out of range reached the arithmetic: %r", exc)
        return problem(422, "Invalid input", "A number in the request is too large or too "
                       "precise; send a smaller one (money has at most two decimals).")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return problem(500, "Internal error",
                       "Something failed on our side; retry, and report it if it persists.")


def _allowed_methods(request: Request) -> str:
    """Every method a route takes at this path, as the API document lists it (the router's
    405 names only the first route that matched the path)."""
    literal: set[str] = set()  # routes whose path is exactly this one
    templated: set[str] = set()  # routes that take it as a parameter (/invoices/{id})
    for context in iter_route_contexts(request.app.routes):
        if isinstance(context.original_route, APIRoute):
            match, _ = context.matches(request.scope)
            if match is not Match.NONE:
                templated_path = "{" in str(context.path)
                (templated if templated_path else literal).update(context.methods or ())
    return ", ".join(sorted(literal or templated))
