"""Dependency aliases for routers."""

from __future__ import annotations

import re
from typing import Annotated, get_args

from fastapi import Depends, Header, Query, Request, Security
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpulease.api.access import Caller, declared
from gpulease.api.limits import note_auth_failure
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Forbidden, InvalidInput, Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts.identity import authenticate


async def get_platform(request: Request) -> Platform:
    """Async: no I/O, so FastAPI runs it inline instead of hopping to a worker thread."""
    platform: Platform = request.app.state.platform
    return platform


# Declares the scheme in the OpenAPI document; the token itself is checked below.
bearer_scheme = HTTPBearer(auto_error=False, scheme_name="apiToken", description=(
    "An API token (glp_…) from `gpulease token-create` or POST /api/v1/tokens."))
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


async def bearer_token(credentials: BearerCredentials) -> str | None:
    """The bearer token as sent (checked later, in the endpoint's own thread); declared
    as the API's security scheme, so the OpenAPI document says the route needs it."""
    return credentials.credentials.strip() if credentials is not None else None


def get_principal(request: Request, credentials: BearerCredentials) -> Principal:
    token = credentials.credentials.strip() if credentials is not None else None
    platform: Platform = request.app.state.platform
    try:
        principal = authenticate(platform, token)
    except Unauthorized:
        if token:  # a bad token: its address is counted (a flood is slowed)
            note_auth_failure(platform, request.client.host if request.client else None)
        raise
    request.state.principal = principal  # for the audit trail
    if principal.is_meter:
        _meter_may_call(request)
    return principal


def meter_refused() -> Forbidden:
    return Forbidden("A meter token only reports usage (POST /api/v1/usage).")


def _meter_may_call(request: Request) -> None:
    """A meter's token sits on a collector outside the control plane: it reaches only the
    routes that declare meters (posting usage), whatever the route itself would check."""
    route = request.scope.get("route")
    allowed = declared(getattr(route, "openapi_extra", None))
    if allowed is None or Caller.METER not in allowed.callers:
        raise meter_refused()


PlatformDep = Annotated[Platform, Depends(get_platform)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
TokenDep = Annotated[str | None, Depends(bearer_token)]
# Creating POSTs take it: the same key and body answer the same; another body is a 422.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]
Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="items to skip")]

_PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
# What any route of the API may answer besides its success (documented once for all).
PROBLEMS: dict[int | str, dict[str, object]] = {
    code: {"description": text, "content": _PROBLEM} for code, text in (
        (400, "the body could not be read as the declared type (not JSON, a broken form)"),
        (401, "no token, or an unknown, expired or revoked one (WWW-Authenticate: Bearer)"),
        (403, "the token's role may not do this"),
        (404, "no such resource in your account"),
        (409, "the resource's state does not allow it, or out of stock"),
        (413, "the body is over the limit"),
        (422, "invalid input: `field` and `accepted` say what to send"),
        (429, "over a rate limit (Retry-After)"),
        (503, "the database was lost or busy; nothing was written (Retry-After)"))}
# Routes without a token (for booting servers, probes): no 401, 403 or 409.
PUBLIC_PROBLEMS = {code: doc for code, doc in PROBLEMS.items() if code not in (401, 403, 409)}
PAYMENT_REQUIRED: dict[int | str, dict[str, object]] = {402: {
    "description": "the balance and credit limit do not cover it; `missing` says how much",
    "content": _PROBLEM}}
GONE: dict[int | str, dict[str, object]] = {410: {
    "description": "shown once already", "content": _PROBLEM}}


_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,18}")


def whole_numbers_only(request: Request) -> None:
    """A query parameter declared an integer takes digits (and a minus sign) only: its
    parser would also read `1_000`, ` 5 ` or `+5` as numbers, which the API refuses as it
    refuses such amounts in a body. Every API route depends on it (api/app.py)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    for field in route.dependant.query_params:
        kind = field.field_info.annotation
        if kind is not int and int not in get_args(kind):
            continue
        for raw in request.query_params.getlist(field.alias):
            if not _WHOLE_NUMBER.fullmatch(raw):
                raise InvalidInput(field.alias, "{param} takes a whole number written in "
                                   "digits, like 100 (not {value!r}).", param=field.alias,
                                   value=raw[:40])
