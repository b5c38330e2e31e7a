"""Rate limits on the API and the console, as ASGI middleware: requests per token (or per
console session) and, without one, per source address; an address that keeps presenting
bad tokens is slowed down for all its requests. Over a limit: 429 with Retry-After, before
the app (or the audit trail) sees the request. The counters live in the platform's rate
store (memory, the database or Redis: db/rates.py)."""

from __future__ import annotations

import hashlib
import json

import anyio

from gpulease.api.guards import ASGIApp, Receive, Scope, Send
from gpulease.db.rates import window_end
from gpulease.platform import Platform

MINUTE = 60
UNLIMITED_PREFIXES = ("/healthz", "/readyz", "/console/static/", "/media/", "/api/v1/docs/")
SESSION_COOKIE = b"gpulease_session="


def _credential(headers: dict[bytes, bytes]) -> str | None:
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip()
    for part in headers.get(b"cookie", b"").split(b";"):
        part = part.strip()
        if part.startswith(SESSION_COOKIE):
            return part[len(SESSION_COOKIE):].decode("latin-1") or None
    return None


def auth_failure_key(address: str) -> str:
    return f"authfail:{address}"


def note_auth_failure(p: Platform, address: str | None) -> None:
    """A request from `address` presented a credential that is not valid."""
    if address:
        p.rates.hit(auth_failure_key(address), MINUTE, p.clock.now().timestamp())


async def _refuse(send: Send, retry_after: float, detail: str) -> None:
    wait = max(1, int(retry_after + 0.999))
    body = json.dumps({"type": "about:blank", "title": "Too many requests", "status": 429,
                       "detail": f"{detail} Retry in {wait} s."}).encode()
    await send({"type": "http.response.start", "status": 429, "headers": [
        (b"content-type", b"application/problem+json"), (b"retry-after", str(wait).encode()),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RateLimits:
    def __init__(self, app: ASGIApp, platform: Platform) -> None:
        self.app, self.p = app, platform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(UNLIMITED_PREFIXES):
            await self.app(scope, receive, send)
            return
        s = self.p.settings
        now = self.p.clock.now().timestamp()
        if self.p.rates.sync_due(now):  # shared counters: exchange them, off the loop
            await anyio.to_thread.run_sync(self.p.rates.sync, now)
        client = scope.get("client")
        address = client[0] if client else "unknown"
        credential = _credential(dict(scope.get("headers") or []))
        if credential is not None:
            failures = self.p.rates.count(auth_failure_key(address), MINUTE, now)
            if failures >= s.rate_limit_auth_failures_per_min:
                await _refuse(send, window_end(MINUTE, now) - now,
                              "Too many requests with unknown or expired tokens came from "
                              "your address.")
                return
            key = "tok:" + hashlib.sha256(credential.encode()).hexdigest()[:24]
            limit = s.rate_limit_per_token_per_min
        else:
            key, limit = f"addr:{address}", s.rate_limit_anonymous_per_min
        if self.p.rates.hit(key, MINUTE, now) > limit:
            await _refuse(send, window_end(MINUTE, now) - now,
                          f"This token (or, without one, your address) may make {limit} "
                          "requests a minute.")
            return
        await self.app(scope, receive, send)
