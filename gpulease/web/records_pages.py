"""Two pages of record in the console. Storage and backups (tenant users): the tenant's
bucket against its quota and its access keys, and each live server's backup schedule and
latest runs. The audit trail (a tenant admin: their tenant's; an operator: everyone's):
every state-changing request and sign-in, newest first, filtered by user."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse

from gpulease.api.access import TENANT_USERS, Caller, access
from gpulease.api.deps import PlatformDep
from gpulease.domain.errors import DomainError
from gpulease.domain.states import InstanceStatus
from gpulease.services.instances import views as instances
from gpulease.services.platform import audit
from gpulease.services.storage import backup_policy, backups
from gpulease.services.storage import buckets as storage
from gpulease.web.pages import Who, page, page_context, said

router = APIRouter(prefix="/console", include_in_schema=False,
                   dependencies=[Depends(page_context)])
AUDIT_PAGE = 100


@router.get("/storage", response_class=HTMLResponse, openapi_extra=access(*TENANT_USERS))
def storage_page(p: PlatformDep, who: Who) -> HTMLResponse:
    try:
        who.require_tenant()
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    bucket, why = None, None
    try:
        bucket = storage.show(p, who)
    except DomainError as exc:  # no object storage on this platform: said, the rest shown
        why = said(exc)
    servers: list[dict[str, Any]] = []
    for inst in instances.list_instances(p, who, limit=200).items:
        if inst.status != InstanceStatus.READY or inst.kind == "container":
            continue
        servers.append({"instance": inst, "policy": backup_policy.show(p, who, inst.id),
                        "runs": backups.list_runs(p, who, inst.id, limit=5).items})
    return page("storage.html", who=who, bucket=bucket, storage_error=why, servers=servers)


@router.get("/audit", response_class=HTMLResponse,
            openapi_extra=access(Caller.ADMIN, Caller.OPERATOR))
def audit_page(p: PlatformDep, who: Who,
               user: Annotated[str | None, Query(max_length=32)] = None,
               offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> HTMLResponse:
    try:
        trail = audit.entries(p, who, audit.AuditFilter(user_id=user or None), limit=AUDIT_PAGE,
                              offset=offset)
    except DomainError as exc:
        return page("base.html", exc.status, who=who, error=said(exc))
    return page("audit.html", who=who, trail=trail, user=user or "", offset=offset,
                step=AUDIT_PAGE)
