"""Before a server is pointed at its OS image, the worker asks the image's URL whether it is
there: a 404 (or 410) is the order's fault, not the server's (no other server would find
it either), so the order fails once with that reason instead of moving across servers and
leaving each in maintenance. Anything else (the URL not reachable from the worker, a server
that refuses HEAD) decides nothing: the BMC's own fetch does. The demo's simulated servers
read no media, so it is not asked there."""

from __future__ import annotations

import httpx

from gpulease.ports.records import Records

TIMEOUT_S = 5.0


class MediaMissing(RuntimeError):
    """The image's URL answers that nothing is there."""

    retryable = False
    node_fault = False  # the order's image: no other server would do better


def require_served(p: Records, url: str) -> None:
    """MediaMissing when `url` answers 404 or 410; nothing otherwise."""
    if p.settings.simulated_hardware or not url.startswith(("http://", "https://")):
        return
    try:
        answer = httpx.head(url, timeout=TIMEOUT_S, follow_redirects=True)
    except httpx.HTTPError:
        return  # not reachable from the worker: the BMC's own fetch decides
    if answer.status_code in (404, 410):
        raise MediaMissing(
            f"the OS image is not served at {url} (HTTP {answer.status_code}): build or "
            "upload it there (`gpulease image add`, docs/operations.md: where images come "
            "from) or point GPULEASE_MEDIA_BASE_URL at the server that has it")
