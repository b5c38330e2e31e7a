"""Server-sent events of an instance: its view pushed each time it changes, for the API
(`GET /api/v1/instances/{id}/events`) and the console's delivery page alike. The server
reads a three-statement change marker every half second per stream and the whole view only
when it moved; any API process can serve any stream (it is all in the database). The stream
is bound to its credential: every CREDENTIAL_CHECK_S it checks that the token (or console
session) is still live and its user enabled, and ends with `event: end` saying why when not
(a revoked token's stream does not outlive the revoke by more than that)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.schemas import InstanceView
from gpulease.services.accounts.identity import credential_ended
from gpulease.services.instances import views as instances

FOLLOW_POLL_S = 0.5  # how often a follower's change marker is read (three small statements)
KEEP_ALIVE_S = 15.0  # a comment line this often, so proxies keep a quiet stream open
CREDENTIAL_CHECK_S = 2.0  # how often a stream checks its token and user still hold
ENDS = ("ready", "failed", "released")


async def follow_instance(p: Platform, actor: Principal, request: Request, instance_id: str,
                          until: str, timeout: float) -> StreamingResponse:
    """The stream, after the instance was shown to `actor` (404/403 before any byte)."""
    ends = tuple(u.strip() for u in until.split(",") if u.strip())
    unknown = [u for u in ends if u not in {st.value for st in InstanceStatus}]
    if unknown:
        raise InvalidInput("until", "Unknown instance status {unknown_0!r}.",
                           [st.value for st in InstanceStatus], unknown_0=unknown[0])
    first = await run_in_threadpool(instances.show_instance, p, actor, instance_id)

    async def stream() -> AsyncIterator[str]:
        view: InstanceView | None = first
        marker = await run_in_threadpool(instances.change_marker, p, instance_id)
        deadline = time.monotonic() + timeout
        sent = 0
        quiet_since = checked = time.monotonic()
        while True:
            if view is not None:
                sent += 1
                yield f"event: instance\nid: {sent}\ndata: {view.model_dump_json()}\n\n"
                quiet_since = time.monotonic()
                if view.status in ends:
                    yield "event: end\ndata: {}\n\n"
                    return
                view = None
            if time.monotonic() > deadline or await request.is_disconnected():
                yield "event: end\ndata: {\"timeout\": true}\n\n"
                return
            if time.monotonic() - checked > CREDENTIAL_CHECK_S:
                checked = time.monotonic()
                why = await run_in_threadpool(credential_ended, p, actor)
                if why is not None:
                    yield f"event: end\ndata: {json.dumps({'unauthorized': why})}\n\n"
                    return
            if time.monotonic() - quiet_since > KEEP_ALIVE_S:
                yield ": keep-alive\n\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(FOLLOW_POLL_S)
            moved = await run_in_threadpool(instances.change_marker, p, instance_id)
            if moved != marker:
                marker = moved
                view = await run_in_threadpool(instances.show_instance, p, actor,
                                               instance_id)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
