"""Dependency aliases for routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from gpulease.api.limits import note_auth_failure
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts import authenticate


async def get_platform(request: Request) -> Platform:
    """Async: no I/O, so FastAPI runs it inline instead of hopping to a worker thread."""
    platform: Platform = request.app.state.platform
    return platform


async def bearer_token(request: Request) -> str | None:
    """The bearer token as sent (checked later, in the endpoint's own thread)."""
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


def get_principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else None
    platform: Platform = request.app.state.platform
    try:
        principal = authenticate(platform, token)
    except Unauthorized:
        if token:  # a bad token: its address is counted (a flood is slowed)
            note_auth_failure(platform, request.client.host if request.client else None)
        raise
    request.state.principal = principal  # for the audit trail
    return principal


PlatformDep = Annotated[Platform, Depends(get_platform)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
TokenDep = Annotated[str | None, Depends(bearer_token)]
# Creating POSTs take it: the same key and body answer the same; another body is a 422.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]
Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="items to skip")]
