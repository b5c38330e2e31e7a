"""What every HTTP exchange passes through, as plain ASGI middleware: a request id, a limit
on the body's size (413 before the app reads more), and the security headers of every
answer (the console's with a content security policy)."""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

from gpulease import process_metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID = "x-request-id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# The id of the request being handled (for log lines and the audit trail).
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

CONSOLE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' "
                  "data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
                  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# Swagger UI and ReDoc style their pages inline and ReDoc runs a worker from a blob; every
# file comes from here (a logo either would fetch from elsewhere is blocked).
DOCS_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
               "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
               "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
               "frame-ancestors 'none'")


class RequestIdFilter(logging.Filter):
    """Puts the request's id on every log line written while it is handled (`-` outside
    a request): `%(request_id)s` in the format."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get() or "-"
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, request id, message, and the
    record's structured fields (`fields`: an access line's method, path, status…)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "at": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name,
            "request_id": getattr(record, "request_id", "-"), "message": record.getMessage()}
        doc.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure_logging(level: int | str = logging.INFO, fmt: str = "text") -> None:
    """One line per record, with its request id: text, or JSON lines (`fmt="json"`)."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    if fmt == "json":
        formatter: logging.Formatter = JsonLines()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)


access_log = logging.getLogger("gpulease.access")
QUIET_PATHS = ("/healthz", "/readyz", "/console/static/")  # probes and assets: no line


class BodyTooLarge(Exception):
    pass


def _problem(status: int, title: str, detail: str, headers: list[tuple[bytes, bytes]]
             ) -> tuple[Message, Message]:
    body = json.dumps({"type": "about:blank", "title": title, "status": status,
                       "detail": detail}).encode()
    start = {"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()), *headers]}
    return start, {"type": "http.response.body", "body": body}


# Paths whose next segment is a capability (whoever holds it reads a config drive, a
# ramdisk's plan): logged cut to its first characters.
CAPABILITY_PATHS = ("/media/config/", "/media/nocloud/", "/media/ramdisk/")


def _redacted(path: str) -> str:
    for prefix in CAPABILITY_PATHS:
        if path.startswith(prefix):
            secret, _, rest = path[len(prefix):].partition("/")
            return f"{prefix}{secret[:6]}…" + (f"/{rest}" if rest else "")
    return path


def route_template(scope: Scope) -> str:
    """The route as written (/api/v1/users/{user_id}), from the path and its parameters."""
    params: dict[str, Any] = scope.get("path_params") or {}
    names = {str(v): k for k, v in params.items()}
    return "/".join(f"{{{names[seg]}}}" if seg in names else seg
                    for seg in str(scope.get("path", "")).split("/"))


def _no_store(scope: Scope, given: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`Cache-Control: no-store` on every API answer that set no cache policy of its own:
    answers carry tokens, passwords and keys, and no shared or browser cache may keep
    them (the answers with ETags say `private, no-cache` themselves)."""
    path: str = scope.get("path", "")
    if not path.startswith(("/api/", "/console/")) or path.startswith("/console/static/"):
        return []
    if any(name.lower() == b"cache-control" for name, _ in given):
        return []
    return [(b"cache-control", b"no-store")]


class Guards:
    """Request id, body limit and security headers around the whole app."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        began = time.perf_counter()
        status = 0
        given = headers.get(REQUEST_ID.encode(), b"").decode("latin-1")
        rid = given if _SANE_ID.match(given) else secrets.token_hex(8)
        token = request_id.set(rid)
        extra = self._headers(scope, rid)
        limit = self.max_body_bytes
        too_large = False
        started = False

        async def refuse() -> None:
            start, body = _problem(413, "Payload too large",
                                   f"The request body is over {limit:,} bytes; send less "
                                   "(split a batch), or ask the operator to raise "
                                   "GPULEASE_MAX_BODY_BYTES.", extra)
            await send(start)
            await send(body)

        async def send_guarded(message: Message) -> None:
            nonlocal started, status
            if too_large:  # the app answered a body it could not read: say why instead
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await refuse()
                return
            if message["type"] == "http.response.start":
                started = True
                status = int(message["status"])
                given = message.get("headers", [])
                message["headers"] = [*given, *extra, *_no_store(scope, given)]
            await send(message)

        received = 0

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    too_large = True
                    raise BodyTooLarge()
            return message

        try:
            declared = int(headers.get(b"content-length", b"0") or 0)
        except ValueError:
            declared = 0
        try:
            if declared > limit:
                await refuse()
                return
            await self.app(scope, limited_receive, send_guarded)
        except BodyTooLarge:
            if not started:
                started = True
                status = 413
                await refuse()
        finally:
            self._log(scope, status or 500, time.perf_counter() - began)
            request_id.reset(token)

    @staticmethod
    def _log(scope: Scope, status: int, seconds: float) -> None:
        """The access line: method, path, status, time, request id (on every line) and the
        actor, when one was authenticated; and the request counted by its route template."""
        path: str = scope.get("path", "")
        route = route_template(scope) if scope.get("route") is not None else "(no route)"
        process_metrics.request_answered(str(scope.get("method")), route, status, seconds)
        if not access_log.isEnabledFor(logging.INFO) or path.startswith(QUIET_PATHS):
            return
        path = _redacted(path)
        state = scope.get("state") or {}
        who = state.get("principal") if isinstance(state, dict) else None
        actor = f"{who.role.value}:{who.user_id}" if who is not None else "-"
        client = scope.get("client")
        access_log.info("%s %s %d %.1f ms %s", scope.get("method"), path, status,
                        seconds * 1000, actor, extra={"fields": {
                            "method": scope.get("method"), "path": path, "status": status,
                            "ms": round(seconds * 1000, 1), "actor": actor,
                            "source": client[0] if client else None}})

    @staticmethod
    def _headers(scope: Scope, rid: str) -> list[tuple[bytes, bytes]]:
        path: str = scope.get("path", "")
        out = [(REQUEST_ID.encode(), rid.encode()),
               (b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"same-origin")]
        if path.startswith("/console") or path == "/":
            out += [(b"content-security-policy", CONSOLE_POLICY.encode()),
                    (b"x-frame-options", b"DENY")]
        elif path in ("/api/v1/docs", "/api/v1/redoc"):
            out += [(b"content-security-policy", DOCS_POLICY.encode()),
                    (b"x-frame-options", b"DENY")]
        if scope.get("scheme") == "https":
            out.append((b"strict-transport-security", b"max-age=31536000; includeSubDomains"))
        return out
