"""A real agent process phones home over HTTP, pushes telemetry, and the tenant reads it;
reports and certificates over the API. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gpulease.platform import Platform
from gpulease.services.instances import actions
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import node_name_of, place
from gpulease.testing.servers import LiveServer, free_port
from gpulease.worker.runner import Worker


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_agent_enrolls_pushes_and_tenant_reads_metrics(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str, tmp_path: Path,
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    api = f"{server.url}/api/v1"
    assert httpx.post(f"{api}/nodes/{name}/agent-token",
                      headers=auth(tenant.token)).status_code == 403
    minted = httpx.post(f"{api}/nodes/{name}/agent-token", headers=auth(operator.token))
    assert minted.status_code == 201
    token_file = tmp_path / "agent-token"
    token_file.write_text(minted.json()["token"])
    credential = tmp_path / "state" / "credential"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", "agent", "--backend", "simulated",
         "--listen", f"127.0.0.1:{free_port()}", "--interval", "0.1", "--fault", "ecc-dbe:6",
         "--control-plane", server.url, "--enroll-token-file", str(token_file),
         "--credential-file", str(credential), "--push-interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            metrics = httpx.get(f"{api}/instances/{iid}/metrics", headers=auth(tenant.token))
            assert metrics.status_code == 200
            node = metrics.json()["nodes"][0]
            if node["gpus"] and node["alerts"]:
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, f"no telemetry arrived: {node}"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)
    assert node["node"] == name and node["simulated"] is True
    assert [g["index"] for g in node["gpus"]] == list(range(8))
    assert [(a["gpu"], a["kind"]) for a in node["alerts"]] == [(6, "double_bit_ecc")]
    assert oct(os.stat(credential).st_mode & 0o777) == "0o600"
    # the token was one-time; a wrong credential is refused
    again = httpx.post(f"{api}/agent/register", json={"token": token_file.read_text(),
                                                      "hostname": "x"})
    assert again.status_code == 401 and "used or expired" in again.json()["detail"]
    assert httpx.post(f"{api}/agent/telemetry", json={"gpus": []},
                      headers=auth("glan_nope")).status_code == 401
    # without a credential a malformed report is a plain 401: nothing of the body is read
    stranger = httpx.post(f"{api}/agent/telemetry", json={"gpus": [{"index": "zero"}]})
    assert stranger.status_code == 401 and "Summary" not in stranger.text
    bad = httpx.post(f"{api}/agent/telemetry", json={"gpus": [{"index": "zero"}]},
                     headers=auth(credential.read_text()))
    assert bad.status_code == 422 and bad.headers["content-type"].startswith(
        "application/problem+json")
    assert "__init__" not in bad.text and "GpuSummary" not in bad.text  # no internals
    other = new_tenant(fleet, "other")
    assert httpx.get(f"{api}/instances/{iid}/metrics",
                     headers=auth(other.token)).status_code == 404


def test_reports_and_certificates_over_http_and_cli(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, worker: Worker, key: str,
    tmp_path: Path,
) -> None:
    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    api = f"{server.url}/api/v1"
    reports = httpx.get(f"{api}/instances/{iid}/acceptance",
                        headers=auth(tenant.token)).json()["items"]
    assert [r["passed"] for r in reports] == [True] and reports[0]["trigger"] == "delivery"
    actions.release_instance(fleet, tenant.principal, iid)
    worker.run_until_idle()
    certs = httpx.get(f"{api}/instances/{iid}/erase-certificates",
                      headers=auth(tenant.token)).json()["items"]
    assert len(certs) == 2
    env = {**os.environ, "GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
    out = tmp_path / "cert.json"
    done = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "certificate",
                           certs[0]["id"], "--output", str(out)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["digest"] == certs[0]["digest"]
    listed = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "acceptance", iid],
                            env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "Acceptance PASSED (SIMULATED hardware)" in listed.stdout
    missing = httpx.get(f"{api}/erase-certificates/nope", headers=auth(tenant.token))
    assert missing.status_code == 404


def test_a_push_out_of_bounds_is_refused_whole_and_stores_nothing(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    """NaN, Infinity, a string for a number, a GPU index "0" or 1.5, a 200-character
    uuid, a 100 kB name, ten thousand XIDs: each 422 naming the field; nothing stored."""
    from fastapi.testclient import TestClient
    from sqlalchemy import func, select

    from gpulease.agent.gpu.simulated import SimulatedGpus
    from gpulease.api.app import create_app
    from gpulease.db.tables import TelemetrySummary
    from gpulease.domain.fleet.telemetry import summarize
    from gpulease.services.agents import credentials as agent_credentials

    iid = place(fleet, tenant, key)
    worker.run_until_idle()
    name = node_name_of(fleet, tenant, iid)
    token = agent_credentials.operator_enrollment(fleet, operator.principal, name)
    _, credential = agent_credentials.register(fleet, token, name, None, {})
    (good_summary,) = summarize(SimulatedGpus(count=1).sample())
    good = good_summary.as_dict()

    def stored() -> int:
        with fleet.db.read() as s:
            return s.scalar(select(func.count()).select_from(TelemetrySummary)) or 0

    with TestClient(create_app(fleet)) as client:
        def push(**changed: object) -> Any:
            body = json.dumps({"gpus": [{**good, **changed}]})  # NaN and Infinity as JSON5
            return client.post("/api/v1/agent/telemetry", content=body,
                               headers={**auth(credential), "content-type":
                                        "application/json"})

        assert push().status_code == 202 and stored() == 1
        for field, value in (("temp_max_c", float("nan")), ("power_avg_w", float("inf")),
                             ("util_avg_pct", "high"), ("index", "0"), ("index", 1.5),
                             ("uuid", "u" * 200), ("name", "n" * 100_000),
                             ("xids", [79] * 10_000), ("util_avg_pct", 140)):
            answer = push(**{field: value})
            assert answer.status_code == 422, (field, answer.text[:200])
            assert field in answer.json()["detail"] and "Nothing was stored" in answer.json()[
                "detail"]
        assert stored() == 1
