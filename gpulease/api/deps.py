"""Dependency aliases for routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

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
Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, description="items to skip")]
