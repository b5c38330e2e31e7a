"""The audit trail: operators read all of it, tenant admins their tenant's; operators
verify the chain."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import AwareDatetime

from gpulease.api.access import Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.schemas import AuditEntryView, AuditVerdict, Page
from gpulease.services.platform import audit

router = APIRouter(tags=["audit"])


@router.get("/audit", response_model=Page[AuditEntryView],
            openapi_extra=access(Caller.ADMIN, Caller.OPERATOR))
def audit_trail(p: PlatformDep, actor: PrincipalDep, tenant: str | None = None,
                user: str | None = None, since: AwareDatetime | None = None,
                limit: Limit = 50, offset: Offset = 0) -> Page[AuditEntryView]:
    """Every state-changing request and console sign-in, newest first: who (user, token,
    role), tenant, source address, action, target, outcome and request id."""
    return audit.entries(p, actor, audit.AuditFilter(tenant_id=tenant, user_id=user, since=since),
                         limit=limit, offset=offset)


@router.get("/audit/verify", response_model=AuditVerdict, openapi_extra=access(Caller.OPERATOR))
def verify(p: PlatformDep, actor: PrincipalDep) -> AuditVerdict:
    """Operator: walk the chain; a changed or removed row is named."""
    return audit.verify(p, actor)
