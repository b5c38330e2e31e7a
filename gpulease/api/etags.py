"""Conditional GETs: a body's entity tag, and a 304 for a poller that already has it.

The tag is a hash of the JSON the route would send, so it changes exactly when the answer
does (a stock count, a stage, a price) and needs no version column; the work saved is the
transfer and the client's parsing, not the reads. Weak tags (`W/"…"`), as the body is
compared by meaning, not byte for byte across versions."""

from __future__ import annotations

import hashlib

from fastapi import Request, Response

JSON = "application/json"


def entity_tag(body: str | bytes) -> str:
    data = body.encode() if isinstance(body, str) else body
    return f'W/"{hashlib.sha256(data).hexdigest()[:32]}"'


def matches(request: Request, tag: str) -> bool:
    """Whether If-None-Match names this tag (or `*`); weak comparison, as RFC 9110 asks
    for GET."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    wanted = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in wanted or tag.removeprefix("W/") in wanted


def conditional(request: Request, body: str, media_type: str = JSON) -> Response:
    """The body with its ETag, or 304 Not Modified (no body) when the client has it."""
    tag = entity_tag(body)
    headers = {"ETag": tag, "Cache-Control": "private, no-cache"}
    if matches(request, tag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)
