"""Fabrics and racks as managed objects, a node's update and deletion, over HTTP and the
CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import inventory
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def test_fabrics_and_racks_are_created_listed_changed_and_deleted_only_when_empty(
    fleet: Platform, server: LiveServer, operator: TenantCtx, tenant: TenantCtx
) -> None:
    h, api = auth(operator.token), f"{server.url}/api/v1"
    made = httpx.post(f"{api}/fabrics", headers=h, json={
        "id": "roce-sichuan-9", "region": "sichuan-1", "kind": "roce", "rate_gbps": 200})
    assert made.status_code == 201, made.text
    assert made.json() == {"id": "roce-sichuan-9", "region": "sichuan-1", "kind": "roce",
                           "rate_gbps": 200, "racks": 0, "nodes": 0}
    assert httpx.post(f"{api}/fabrics", headers=h, json={
        "id": "roce-sichuan-9", "region": "sichuan-1"}).status_code == 409
    bad = httpx.post(f"{api}/fabrics", headers=h, json={"id": "x", "region": "mars"})
    assert bad.status_code == 422 and "Unknown region" in bad.json()["detail"]
    assert httpx.post(f"{api}/fabrics", headers=auth(tenant.token),
                      json={"id": "y", "region": "sichuan-1"}).status_code == 403

    rack = httpx.post(f"{api}/racks", headers=h, json={
        "id": "sichuan-1-r09", "region": "sichuan-1", "zone": "hall-b",
        "fabric": "roce-sichuan-9", "leaf_switch": "leaf-9"})
    assert rack.status_code == 201 and rack.json()["fabric"] == "roce-sichuan-9"
    wrong = httpx.post(f"{api}/racks", headers=h, json={
        "id": "r-x", "region": "ningxia-1", "zone": "a", "fabric": "roce-sichuan-9"})
    assert wrong.status_code == 422 and "is in sichuan-1, not ningxia-1" in wrong.json()["detail"]

    fabrics = {f["id"]: f for f in httpx.get(f"{api}/fabrics", headers=h).json()["items"]}
    demo = fabrics["ib-ningxia-1-1"]
    assert demo["kind"] == "infiniband" and demo["nodes"] >= 2 and demo["racks"] == 1
    assert fabrics["roce-sichuan-9"]["racks"] == 1
    assert httpx.patch(f"{api}/fabrics/ib-ningxia-1-1", headers=h,
                       json={"rate_gbps": 200}).json()["rate_gbps"] == 200
    busy = httpx.delete(f"{api}/fabrics/ib-ningxia-1-1", headers=h)
    assert busy.status_code == 409 and "still has" in busy.json()["detail"]
    assert httpx.delete(f"{api}/fabrics/roce-sichuan-9", headers=h).status_code == 409  # rack
    assert httpx.patch(f"{api}/racks/sichuan-1-r09", headers=h,
                       json={"fabric": ""}).json()["fabric"] is None
    assert httpx.delete(f"{api}/fabrics/roce-sichuan-9", headers=h).status_code == 204
    assert httpx.delete(f"{api}/racks/sichuan-1-r09", headers=h).status_code == 204
    assert httpx.delete(f"{api}/racks/sichuan-1-r09", headers=h).status_code == 404

    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
    cli = CliRunner()
    r = cli.invoke(app, ["fabric", "create", "ib-sichuan-7", "--region", "sichuan-1",
                         "--rate-gbps", "800"], env=env)
    assert r.exit_code == 0 and "infiniband 800 Gbit/s" in r.output
    r = cli.invoke(app, ["rack", "create", "sichuan-1-r07", "--region", "sichuan-1",
                         "--zone", "hall-a", "--fabric", "ib-sichuan-7"], env=env)
    assert r.exit_code == 0 and "on fabric ib-sichuan-7" in r.output
    listed = cli.invoke(app, ["fabrics"], env=env)
    assert listed.exit_code == 0 and "ib-sichuan-7" in listed.output
    listed = cli.invoke(app, ["racks", "--region", "sichuan-1", "--json"], env=env)
    assert listed.exit_code == 0 and '"sichuan-1-r07"' in listed.output
    refused = cli.invoke(app, ["fabric", "delete", "ib-sichuan-7"], env=env)
    assert refused.exit_code == 1 and "still has 0 nodes and 1 racks" in refused.output


def test_a_node_is_updated_and_deleted_but_never_while_rented(
    fleet: Platform, server: LiveServer, operator: TenantCtx, tenant: TenantCtx, key: str
) -> None:
    h, api = auth(operator.token), f"{server.url}/api/v1"
    assert httpx.post(f"{api}/fabrics", headers=h, json={
        "id": "ib-ningxia-1-2", "region": "ningxia-1"}).status_code == 201
    assert httpx.post(f"{api}/racks", headers=h, json={
        "id": "ningxia-1-r02", "region": "ningxia-1", "zone": "hall-a"}).status_code == 201
    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    Worker(fleet).run_until_idle()
    rented = view.nodes[0].name
    free = next(n for n in inventory.list_nodes(fleet, operator.principal, limit=500).items
                if n.sku == "h100-80g-x8" and n.region == "ningxia-1" and n.status == "available")

    moved = httpx.patch(f"{api}/nodes/{rented}", headers=h, json={"rack": "ningxia-1-r02"})
    assert moved.status_code == 200 and moved.json()["rack"] == "ningxia-1-r02"
    held = httpx.patch(f"{api}/nodes/{rented}", headers=h, json={"fabric": "ib-ningxia-1-2"})
    assert held.status_code == 409 and "holds a tenant's instance" in held.json()["detail"]
    gone = httpx.delete(f"{api}/nodes/{rented}", headers=h)
    assert gone.status_code == 409 and "drain it" in gone.json()["detail"]
    elsewhere = httpx.patch(f"{api}/nodes/{free.name}", headers=h, json={"fabric": "ib-x"})
    assert elsewhere.status_code == 422 and "fabric create" in elsewhere.json()["detail"]
    taken = httpx.patch(f"{api}/nodes/{free.name}", headers=h, json={"name": rented})
    assert taken.status_code == 409

    changed = httpx.patch(f"{api}/nodes/{free.name}", headers=h, json={
        "name": "h100-spare", "fabric": "ib-ningxia-1-2", "bmc_username": "ops",
        "bmc_password": "rotated-secret"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["name"] == "h100-spare"
    assert changed.json()["fabric"] == "ib-ningxia-1-2"
    history = httpx.get(f"{api}/nodes/h100-spare/history", headers=h).json()["items"]
    assert "fabric ib-ningxia-1-1 → ib-ningxia-1-2" in history[0]["message"]
    assert "rotated-secret" not in str(history)

    deleted = httpx.delete(f"{api}/nodes/h100-spare", headers=h,
                           params={"reason": "sold to another provider"})
    assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
    node_id = deleted.json()["id"]
    assert "sold to another provider; was h100-spare" in deleted.json()["status_reason"]
    listed = httpx.get(f"{api}/nodes", headers=h, params={"limit": 500}).json()["items"]
    assert node_id not in {n["id"] for n in listed}
    assert httpx.get(f"{api}/nodes", headers=h,
                     params={"status": "deleted"}).json()["items"][0]["id"] == node_id
    assert httpx.get(f"{api}/nodes/{node_id}/history", headers=h).json()["total"] >= 2
    assert httpx.delete(f"{api}/nodes/{node_id}", headers=h).status_code == 409
    assert httpx.patch(f"{api}/nodes/{node_id}", headers=h,
                       json={"name": "again"}).status_code == 409
    counts = httpx.get(f"{api}/nodes/counts", headers=h).json()["items"]
    assert all(c["status"] != "deleted" for c in counts)
    # its fabric is free to go now
    assert httpx.delete(f"{api}/fabrics/ib-ningxia-1-2", headers=h).status_code == 204

    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
    other = next(n for n in inventory.list_nodes(fleet, operator.principal, limit=500).items
                 if n.status == "available")
    r = CliRunner().invoke(app, ["node", "update", other.name, "--rack", ""], env=env)
    assert r.exit_code == 0 and "rack -" in r.output
    r = CliRunner().invoke(app, ["node", "delete", other.name, "--reason", "test"], env=env)
    assert r.exit_code == 0 and "deleted" in r.output
