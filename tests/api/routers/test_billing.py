"""Usage reports, invoices (JSON, CSV, PDF), the invoice run and credit notes over real
HTTP and through the CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pypdf import PdfReader
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx, auth, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def test_usage_invoices_and_credit_notes_over_http(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str, tmp_path: Path,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, 0, tzinfo=UTC))
    fleet.clock = clock
    api = f"{server.url}/api/v1"
    iid = deliver(fleet, tenant, worker, key)
    clock.at = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    record = {"key": "nf-2026-11-30-23", "instance_id": iid, "kind": "egress_gb",
              "quantity": "200", "started_at": "2026-11-30T22:00:00+08:00",
              "ended_at": "2026-11-30T23:00:00+08:00"}  # November on the platform's calendar
    assert httpx.post(f"{api}/usage", headers=auth(tenant.token),
                      json={"records": [record]}).status_code == 403
    first = httpx.post(f"{api}/usage", headers=auth(operator.token), json={"records": [record]})
    assert first.status_code == 200 and first.json()[0]["amount"] == "100.00"
    again = httpx.post(f"{api}/usage", headers=auth(operator.token), json={"records": [record]})
    assert again.json()[0]["duplicate"] is True
    changed = httpx.post(f"{api}/usage", headers=auth(operator.token),
                         json={"records": [{**record, "quantity": "300"}]})
    assert changed.status_code == 409
    assert changed.headers["content-type"].startswith("application/problem+json")
    negative = httpx.post(f"{api}/usage", headers=auth(operator.token),
                          json={"records": [{**record, "key": "n", "quantity": "-5"}]})
    assert negative.status_code == 422
    listed = httpx.get(f"{api}/usage", headers=auth(tenant.token)).json()
    assert listed["total"] == 1

    clock.at = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    assert httpx.post(f"{api}/invoices/run", headers=auth(tenant.token),
                      json={"period": "2026-11"}).status_code == 403
    bad = httpx.post(f"{api}/invoices/run", headers=auth(operator.token),
                     json={"period": "11/2026"})
    assert bad.status_code == 422 and bad.json()["field"] == "period"
    run = httpx.post(f"{api}/invoices/run", headers=auth(operator.token),
                     json={"period": "2026-11", "finalize": True}).json()
    assert run["finalized"] == 1
    inv = httpx.get(f"{api}/invoices", headers=auth(tenant.token)).json()["items"][0]
    assert inv["number"] == "GL2026-000001" and inv["total"] == "84580.00"
    one = httpx.get(f"{api}/invoices/{inv['number']}", headers=auth(tenant.token)).json()
    assert [ln["gross"] for ln in one["lines"]] == ["84480.00", "100.00"]
    csv = httpx.get(f"{api}/invoices/{inv['id']}?format=csv", headers=auth(tenant.token))
    assert csv.headers["content-type"].startswith("text/csv") and "84580.00" in csv.text
    pdf = httpx.get(f"{api}/invoices/{inv['id']}?format=pdf", headers=auth(tenant.token))
    assert pdf.headers["content-type"] == "application/pdf"
    assert "GL2026-000001" in PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
    other = new_tenant(fleet, "nosy")
    assert httpx.get(f"{api}/invoices/{inv['id']}",
                     headers=auth(other.token)).status_code == 404

    note = httpx.post(f"{api}/invoices/{inv['id']}/credit-notes", headers=auth(operator.token),
                      json={"reason": "egress double-counted upstream", "amount": "100"})
    assert note.status_code == 201 and note.json()["total"] == "-100.00"
    over = httpx.post(f"{api}/invoices/{inv['id']}/credit-notes", headers=auth(operator.token),
                      json={"reason": "x", "amount": "-1"})
    assert over.status_code == 422 and over.json()["field"] == "amount"

    # the CLI against the same server
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "250"}
    runner = CliRunner()
    listed_cli = runner.invoke(app, ["invoices"], env=env)
    assert listed_cli.exit_code == 0 and "GL2026-000001" in listed_cli.output
    shown = runner.invoke(app, ["invoice", "GL2026-000001"], env=env)
    assert shown.exit_code == 0 and "84,580.00" in shown.output
    out = tmp_path / "inv.pdf"
    saved = runner.invoke(app, ["invoice", "GL2026-000001", "--pdf", str(out)], env=env)
    assert saved.exit_code == 0 and out.read_bytes().startswith(b"%PDF")
    ops = {**env, "GPULEASE_TOKEN": operator.token}
    drafted = runner.invoke(app, ["invoice-run", "2026-12"], env=ops)
    assert drafted.exit_code == 0 and "2026-12:" in drafted.output
    refused = runner.invoke(app, ["invoice-run", "2026-12", "--finalize"], env=ops)
    assert refused.exit_code != 0 and "has not ended" in refused.output
    used = runner.invoke(app, ["usage", "--instance", iid], env=env)
    assert used.exit_code == 0 and "nf-2026-11-30-23" in used.output

    # A meter's token posts usage; what the node could not have sent waits for review.
    made = runner.invoke(app, ["meter-create", "netflow-ningxia", "--json"], env=ops)
    assert made.exit_code == 0, made.output
    meter = json.loads(made.output)["token"]["token"]
    forged = httpx.post(f"{api}/usage", headers=auth(meter), json={"records": [
        {**record, "key": "nf-forged", "quantity": "999999999999"}]}).json()[0]
    assert forged["status"] == "held" and forged["amount"] == "499999999999.50"
    held = runner.invoke(app, ["usage", "--held"], env=ops)
    assert held.exit_code == 0 and "nf-forged" in held.output and "uplink" in held.output
    decided = runner.invoke(app, ["usage-decide", str(forged["id"]), "reject"], env=ops)
    assert decided.exit_code == 0 and "rejected" in decided.output
    assert httpx.get(f"{api}/usage/held", headers=auth(operator.token)).json()["total"] == 0
