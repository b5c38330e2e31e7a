"""The operator's fleet views: nodes filtered by fabric and rack, counts per region, rack,
fabric and status, and a node's history with who caused each step, over HTTP and the CLI.
SQLite and PostgreSQL."""

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


def test_filters_counts_and_history(fleet: Platform, server: LiveServer, operator: TenantCtx,
                                    tenant: TenantCtx, key: str) -> None:
    everything = inventory.list_nodes(fleet, operator.principal, limit=500).items
    fabric = next(n.fabric for n in everything if n.fabric)
    on_fabric = httpx.get(f"{server.url}/api/v1/nodes", params={"fabric": fabric},
                          headers=auth(operator.token)).json()
    assert on_fabric["total"] == sum(1 for n in everything if n.fabric == fabric) >= 1
    assert all(n["fabric"] == fabric for n in on_fabric["items"])
    assert httpx.get(f"{server.url}/api/v1/nodes", params={"rack": "nowhere"},
                     headers=auth(operator.token)).json()["total"] == 0

    counts = httpx.get(f"{server.url}/api/v1/nodes/counts",
                       headers=auth(operator.token)).json()["items"]
    assert sum(c["nodes"] for c in counts) == len(everything)
    assert httpx.get(f"{server.url}/api/v1/nodes/counts",
                     headers=auth(tenant.token)).status_code == 403

    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    Worker(fleet).run_until_idle()
    node = view.nodes[0].name
    history = httpx.get(f"{server.url}/api/v1/nodes/{node}/history",
                        headers=auth(operator.token)).json()
    steps = [(e["kind"], e["to_value"]) for e in history["items"]]
    assert ("status", "active") in steps and history["total"] == len(history["items"])
    assert history["items"][0]["at"] >= history["items"][-1]["at"]  # newest first
    assert all(e["actor"] for e in history["items"])
    assert httpx.get(f"{server.url}/api/v1/nodes/none/history",
                     headers=auth(operator.token)).status_code == 404

    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
    shown = CliRunner().invoke(app, ["node", "history", node], env=env)
    assert shown.exit_code == 0 and "active" in shown.output
    counted = CliRunner().invoke(app, ["nodes", "--counts", "--json"], env=env)
    assert counted.exit_code == 0 and '"nodes"' in counted.output
