"""The audit trail's eye on the API: every state-changing request (POST, PUT, PATCH,
DELETE on a route of the app) is recorded with its actor, source address, action, target
and outcome as its answer starts: handed to the writer thread (services/platform/audit_writer.py),
or committed first with GPULEASE_AUDIT_WRITE=sync (services/platform/audit.py keeps the chain).
The agents' telemetry pushes (a machine's minute-by-minute traffic) and the POSTs that only compute
an answer (quotes, advice) are left out. What a successful change made is in its target too:
the answer's own `id`, `role`, `amount` and the like (a new user's id and role, a token's id,
an order's instance id), read from the JSON answer before it leaves, and what it asked for
(the request's `amount`, `credit_limit`, `role`, `reference`, `sku` and the like: a
top-up's amount); never a password, token or key."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio

from gpulease.api.guards import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    request_id,
    route_template,
)
from gpulease.domain.accounts import Principal
from gpulease.platform import Platform
from gpulease.services.platform import audit, audit_writer

log = logging.getLogger("gpulease.audit")
CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Machine traffic, and POSTs that compute an answer but change nothing.
UNAUDITED = frozenset({"/api/v1/agent/telemetry", "/api/v1/quotes", "/api/v1/advise"})
# What an answer says it made, kept in the target (scalars only; never a secret field).
MADE = ("id", "role", "amount", "credit_limit", "quantity", "status", "kind", "sku",
        "instance_id", "user_id", "tenant_id", "reference")
# What a request asked for, kept in the target (scalars only; never a secret field).
ASKED = ("amount", "credit_limit", "quantity", "role", "reference", "sku", "region", "term",
         "kind", "nodes", "gpus", "offer", "severity", "reason")
MAX_ANSWER_READ = 64 * 1024  # a larger answer (or request) is passed as it comes, unread


def made_by(body: bytes, names: tuple[str, ...] = MADE) -> dict[str, str]:
    """The fields of `names` that a JSON document (or its nested objects) carries."""
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    found: dict[str, str] = {}
    for where in (doc, *(v for v in doc.values() if isinstance(v, dict))):
        for name in names:
            value = where.get(name)
            if name not in found and isinstance(value, str | int | float) and \
                    not isinstance(value, bool):
                found[name] = str(value)
    return found


def _template(path: str, params: dict[str, Any]) -> str:
    """The route as written (/api/v1/users/{user_id}), from the path and its parameters."""
    names = {str(v): k for k, v in params.items()}
    return "/".join(f"{{{names[seg]}}}" if seg in names else seg for seg in path.split("/"))


def _happening(scope: Scope, status: int, p: Platform, made: dict[str, str] | None = None,
               asked: dict[str, str] | None = None) -> audit.Happening | None:
    if scope.get("route") is None:
        return None  # no route of the app matched: nothing happened
    params: dict[str, Any] = scope.get("path_params") or {}
    template = route_template(scope)
    if template in UNAUDITED:
        return None
    state: dict[str, Any] = scope.get("state") or {}
    who: Principal | None = state.get("principal")
    extra: dict[str, str] = state.get("audit_target") or {}
    said = params | extra | {f"asked.{k}": v for k, v in (asked or {}).items()}
    known = set(said.values())  # the path's own ids are not said twice
    said |= {f"answer.{k}": v for k, v in (made or {}).items() if v not in known}
    target = " ".join(f"{k}={v}" for k, v in said.items()) or None
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

        held: list[Message] = []  # a successful JSON answer, until its body is read
        size = 0
        request_body: list[bytes] = []  # what the request sent, up to MAX_ANSWER_READ

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request" and \
                    sum(map(len, request_body)) <= MAX_ANSWER_READ:
                request_body.append(message.get("body", b""))
            return message

        def asked() -> dict[str, str]:
            sent = b"".join(request_body)
            return made_by(sent, ASKED) if 0 < len(sent) <= MAX_ANSWER_READ else {}

        async def record(status: int, made: dict[str, str] | None) -> None:
            happening = _happening(scope, status, self.platform, made, asked())
            if happening is not None and self.platform.settings.audit_write == "batch":
                audit_writer.writer(self.platform).submit(happening)
            elif happening is not None:
                try:
                    await anyio.to_thread.run_sync(audit.record, self.platform, happening)
                except Exception:  # the change stands; the missing row is logged
                    log.exception("audit row not written: %s", happening)

        async def send_after_recording(message: Message) -> None:
            nonlocal size
            if message["type"] == "http.response.start":
                status = int(message["status"])
                kind = dict(message.get("headers") or []).get(b"content-type", b"")
                if 200 <= status < 300 and b"json" in kind:
                    held.append(message)
                    return
                await record(status, None)
            elif held and message["type"] == "http.response.body":
                held.append(message)
                size += len(message.get("body", b""))
                if message.get("more_body", False) and size <= MAX_ANSWER_READ:
                    return
                whole = b"".join(m.get("body", b"") for m in held[1:])
                await record(int(held[0]["status"]),
                             None if message.get("more_body", False) else made_by(whole))
                waiting = held[:]
                held.clear()
                for m in waiting:
                    await send(m)
                return
            await send(message)

        await self.app(scope, reading, send_after_recording)
