"""The audit trail's eye on the API: every state-changing request (POST, PUT, PATCH,
DELETE on a route of the app) is recorded with its actor, source address, action, target
and outcome as its answer starts: handed to the writer thread (services/platform/audit_writer.py),
or committed first with GPULEASE_AUDIT_WRITE=sync (services/platform/audit.py keeps the chain).
The agents' telemetry pushes (a machine's minute-by-minute traffic) and the POSTs that only compute
an answer (quotes, advice) are left out."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from gpulease.api.guards import ASGIApp, Message, Receive, Scope, Send, request_id
from gpulease.domain.accounts import Principal
from gpulease.platform import Platform
from gpulease.services.platform import audit, audit_writer

log = logging.getLogger("gpulease.audit")
CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Machine traffic, and POSTs that compute an answer but change nothing.
UNAUDITED = frozenset({"/api/v1/agent/telemetry", "/api/v1/quotes", "/api/v1/advise"})


def _template(path: str, params: dict[str, Any]) -> str:
    """The route as written (/api/v1/users/{user_id}), from the path and its parameters."""
    names = {str(v): k for k, v in params.items()}
    return "/".join(f"{{{names[seg]}}}" if seg in names else seg for seg in path.split("/"))


def _happening(scope: Scope, status: int, p: Platform) -> audit.Happening | None:
    if scope.get("route") is None:
        return None  # no route of the app matched: nothing happened
    params: dict[str, Any] = scope.get("path_params") or {}
    template = _template(scope.get("path", ""), params)
    if template in UNAUDITED:
        return None
    state: dict[str, Any] = scope.get("state") or {}
    who: Principal | None = state.get("principal")
    extra: dict[str, str] = state.get("audit_target") or {}
    target = " ".join(f"{k}={v}" for k, v in (params | extra).items()) or None
    client = scope.get("client")
    tenant = who.tenant_id if who is not None else None
    if tenant is None and isinstance(params.get("tenant_id"), str):
        tenant = params["tenant_id"]  # an operator acting on a tenant
    return audit.Happening(
        at=p.clock.now(), action=f"{scope['method']} {template}", outcome=status,
        request_id=request_id.get(), user_id=who.user_id if who else None,
        token_id=who.token_id if who else None, role=who.role.value if who else None,
        tenant_id=tenant,
        source=client[0] if client else None, target=target)


class AuditTrail:
    def __init__(self, app: ASGIApp, platform: Platform) -> None:
        self.app, self.platform = app, platform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in CHANGING:
            await self.app(scope, receive, send)
            return

        async def send_after_recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                happening = _happening(scope, int(message["status"]), self.platform)
                if happening is not None and self.platform.settings.audit_write == "batch":
                    audit_writer.writer(self.platform).submit(happening)
                elif happening is not None:
                    try:
                        await anyio.to_thread.run_sync(audit.record, self.platform, happening)
                    except Exception:  # the change stands; the missing row is logged
                        log.exception("audit row not written: %s", happening)
            await send(message)

        await self.app(scope, receive, send_after_recording)
