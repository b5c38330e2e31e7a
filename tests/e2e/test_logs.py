"""What `serve` logs: one line per request (method, path, status, time, request id,
actor) and one per lifecycle transition, as JSON lines when asked; probes write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gpulease.testing.platforms import SECRET
from gpulease.testing.servers import free_port

pytestmark = pytest.mark.slow


def test_serve_logs_each_request_and_each_transition_as_json(tmp_path: Path) -> None:
    env = os.environ | {"GPULEASE_SECRET_KEY": SECRET, "GPULEASE_DATA_DIR": str(tmp_path),
                        "GPULEASE_LOG_FORMAT": "json"}
    made = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "operator-create",
                           "--email", "sre@example.com"], env=env, capture_output=True,
                          text=True, timeout=60)
    token = made.stdout.strip().splitlines()[-1]
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "gpulease.cli.main", "serve", "--port",
                              str(port)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # bounded: 20 s
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        headers = {"Authorization": f"Bearer {token}", "X-Request-Id": "req-abc123"}
        assert httpx.get(f"{base}/api/v1/me", headers=headers).status_code == 200
        node = httpx.post(f"{base}/api/v1/nodes/nowhere/drain", headers=headers)
        assert node.status_code == 404
        httpx.get(f"{base}/media/config/drv-abcdefghijklmnop.iso")  # a capability URL
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    access = [ln for ln in lines if ln["logger"] == "gpulease.access"]
    me = next(ln for ln in access if ln["path"] == "/api/v1/me")
    assert (me["method"], me["status"], me["request_id"]) == ("GET", 200, "req-abc123")
    assert me["actor"].startswith("operator:usr-") and me["ms"] >= 0
    assert any(ln["path"] == "/api/v1/nodes/nowhere/drain" and ln["status"] == 404
               for ln in access)
    assert not any(ln["path"] == "/healthz" for ln in access)  # probes: no line
    # every line is JSON (uvicorn's own too), one says where it listens, no capability
    # URL is logged whole
    assert all(line.startswith("{") for line in err.splitlines() if line.strip()), err
    assert any(ln.get("event") == "listening" and ln.get("port") == port for ln in lines)
    assert "abcdefghijklmnop" not in err
    assert any(ln["path"] == "/media/config/drv-ab…" for ln in access)


def test_each_transition_is_one_log_line(fleet: object, tenant: object, key: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    from gpulease.platform import Platform
    from gpulease.schemas import OrderRequest
    from gpulease.services.orders import ordering as orders
    from gpulease.testing.callers import TenantCtx
    from gpulease.worker.runner import Worker

    assert isinstance(fleet, Platform) and isinstance(tenant, TenantCtx)
    caplog.set_level("INFO", logger="gpulease.lifecycle")
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    Worker(fleet).run_until_idle()
    moves = [r.fields for r in caplog.records  # type: ignore[attr-defined]
             if r.name == "gpulease.lifecycle"]
    mine = [m for m in moves if m["id"] == iid and m["column"] == "status"]
    assert [(m["from"], m["to"]) for m in mine][-1][1] == "ready"
    assert all(m["actor"] for m in moves)
