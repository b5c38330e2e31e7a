"""Dependency aliases for routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from gpulease.domain.accounts import Principal
from gpulease.platform import Platform
from gpulease.services.accounts import authenticate


def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


def get_principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else None
    return authenticate(get_platform(request), token)


PlatformDep = Annotated[Platform, Depends(get_platform)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
# Creating POSTs take it: the same key and body answer the same; another body is a 422.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]
Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, description="items to skip")]
