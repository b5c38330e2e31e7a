"""An OS image whose URL answers 404 fails its order once, naming the URL, instead of moving
the order across servers and leaving each in maintenance (the PostgreSQL quick start's
first order did). The server is cleaned and goes back to the pool. Loopback only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpulease.platform import Platform
from gpulease.services.fleet.media_check import MediaMissing, require_served
from gpulease.services.instances import views as instances
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name, node_name_of, place
from gpulease.worker.runner import Worker


class _Media(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path.endswith("/here.iso") else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def media_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Media)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/media"
    finally:
        server.shutdown()
        server.server_close()


def test_a_missing_image_fails_its_order_once_and_blames_no_server(
    fleet: Platform, tenant: TenantCtx, key: str, media_server: str
) -> None:
    fleet.settings.simulated_hardware = False  # as on real servers: the check is made
    fleet.settings.media_base_url = media_server
    with pytest.raises(MediaMissing, match="HTTP 404"):
        require_served(fleet, f"{media_server}/gone.iso")
    require_served(fleet, f"{media_server}/here.iso")  # served: nothing to say
    require_served(fleet, "http://127.0.0.1:9/nothing-listens.iso")  # unreachable: no verdict

    iid = place(fleet, tenant, key)
    name = node_name_of(fleet, tenant, iid)
    Worker(fleet, owner="media").run_until_idle(timeout_s=30, settle_s=0.5)
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "failed" and "not served at" in (view.status_reason or "")
    assert not any(st.stage == "moved" for st in view.stages)  # failed once, not moved
    assert node_by_name(fleet, name).status == "available"  # cleaned, back in the pool
