"""Sites: a worker of one data centre reaches only its own servers' BMCs, two workers of a
site share its work and take over each other's, a worker of another site never does, and a
site whose own workers are all gone refuses orders with the reason. SQLite and PostgreSQL.

The demo fleet's H100s are in Ningxia (site `ningxia`), its RTX 4090s in Sichuan-2 (site
`sichuan`); every BMC the platform asks is recorded with the worker that asked."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.tables import Instance, Node
from gpulease.domain.catalog import CatalogError
from gpulease.domain.errors import Unavailable
from gpulease.domain.states import InstanceStatus
from gpulease.platform import Platform
from gpulease.ports.bmc import Bmc, BmcEndpoint
from gpulease.services.instances import views as instances
from gpulease.services.platform import sites, workers
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import place
from gpulease.testing.servers import LiveServer
from gpulease.worker.pipelines import instances as instances_pipeline
from gpulease.worker.pipelines import nodes
from gpulease.worker.pipelines.base import claim_due, drive
from gpulease.worker.pipelines.node_inputs import step_input
from gpulease.worker.runner import Worker

NINGXIA = {"sku": "h100-80g-x8", "region": "ningxia-1"}
SICHUAN = {"sku": "rtx4090-24g-x8", "region": "sichuan-2"}


class BmcCalls:
    """Which worker opened which node's BMC: every driver's factory, wrapped."""

    def __init__(self, p: Platform) -> None:
        self.by: str = "nobody"
        self.calls: list[tuple[str, str]] = []
        for name, factory in list(p.drivers.bmc.items()):
            p.drivers.bmc[name] = self._recording(factory)

    def _recording(self, factory: Callable[[BmcEndpoint], Bmc]) -> Callable[[BmcEndpoint], Bmc]:
        def made(endpoint: BmcEndpoint) -> Bmc:
            self.calls.append((self.by, endpoint.node_name))
            return factory(endpoint)
        return made

    def run(self, worker: Worker) -> None:
        self.by = worker.owner
        worker.run_until_idle(timeout_s=60)
        self.by = "nobody"

    def nodes_reached_by(self, owner: str) -> set[str]:
        return {node for who, node in self.calls if who == owner}


def region_of(p: Platform, names: set[str]) -> set[str]:
    with p.db.read() as s:
        return set(s.scalars(select(Node.region).where(Node.name.in_(names))))


def status(p: Platform, t: TenantCtx, iid: str) -> str:
    return str(instances.show_instance(p, t.principal, iid).status)


def site_worker(p: Platform, owner: str, site: str | None) -> Worker:
    """A worker of `site`, registered (alive) as `gpulease worker --site` would be."""
    worker = Worker(p, owner=owner, site=site)
    workers.register(p, owner, 1, site)
    return worker


def test_each_site_s_worker_reaches_only_its_own_servers(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    bmcs = BmcCalls(fleet)
    ningxia = site_worker(fleet, "w-ningxia", "ningxia")
    sichuan = site_worker(fleet, "w-sichuan", "sichuan")
    central = site_worker(fleet, "w-central", None)  # serves the sites without their own
    h100 = place(fleet, tenant, key, **NINGXIA)
    rtx = place(fleet, tenant, key, **SICHUAN)
    ascend = place(fleet, tenant, key, sku="ascend910b-64g-x8", region="huawei-zone")

    bmcs.run(sichuan)
    assert status(fleet, tenant, rtx) == InstanceStatus.READY
    assert status(fleet, tenant, h100) != InstanceStatus.READY  # not Sichuan's to deploy
    bmcs.run(central)
    assert status(fleet, tenant, ascend) == InstanceStatus.READY  # Huawei has no worker
    assert status(fleet, tenant, h100) != InstanceStatus.READY  # Ningxia has its own
    bmcs.run(ningxia)
    assert status(fleet, tenant, h100) == InstanceStatus.READY

    assert region_of(fleet, bmcs.nodes_reached_by("w-sichuan")) == {"sichuan-2"}
    assert region_of(fleet, bmcs.nodes_reached_by("w-ningxia")) == {"ningxia-1"}
    assert region_of(fleet, bmcs.nodes_reached_by("w-central")) == {"huawei-zone"}
    assert {who for who, _ in bmcs.calls} == {"w-sichuan", "w-ningxia", "w-central"}


def test_a_dead_worker_s_rows_go_to_its_own_site_only(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    """Two Ningxia workers: the first dies in the middle of a node's step; once its lock
    lapses, the Sichuan worker and the worker without a site never take the node, the
    second Ningxia worker does."""
    first = site_worker(fleet, "w-ningxia-1", "ningxia")
    sichuan = site_worker(fleet, "w-sichuan", "sichuan")
    second = site_worker(fleet, "w-ningxia-2", "ningxia")
    central = site_worker(fleet, "w-central", None)
    iid = place(fleet, tenant, key, **NINGXIA)
    assert drive(fleet, instances_pipeline.PIPELINE, owner=first.owner, scope=first.scope())
    with fleet.db.read() as s:
        node_id = s.scalar(select(Node.id).where(Node.instance_id == iid))
    held = claim_due(fleet, Node, first.owner, extra=[Node.id == node_id], due=False)
    assert [c.id for c in held] == [node_id]  # and then the first worker dies
    clock.move(seconds=fleet.settings.lock_ttl_s + 1)
    for worker in (sichuan, second, central):
        workers.seen(fleet, worker.owner, 0)
    for other in (sichuan, central):
        assert drive(fleet, nodes.PIPELINE, owner=other.owner, scope=other.scope()) == 0
    assert drive(fleet, nodes.PIPELINE, owner=second.owner, scope=second.scope()) == 1
    with fleet.db.read() as s:
        node = s.get(Node, node_id)
        assert node is not None and node.stage is not None  # its deploy went on


def ningxia_orders(p: Platform) -> int:
    with p.db.read() as s:
        return len(s.scalars(select(Instance.id).where(Instance.region == "ningxia-1")).all())


def test_a_site_whose_workers_are_gone_refuses_its_orders(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx, key: str,
) -> None:
    site_worker(fleet, "w-ningxia", "ningxia")
    site_worker(fleet, "w-sichuan", "sichuan")
    place(fleet, tenant, key, **NINGXIA)  # its worker alive: taken
    clock.move(minutes=5)
    workers.seen(fleet, "w-sichuan", 0)  # only Sichuan's worker still beats
    before = ningxia_orders(fleet)
    with pytest.raises(Unavailable) as refused:
        place(fleet, tenant, key, **NINGXIA)
    assert refused.value.status == 503 and "site ningxia" in refused.value.detail
    assert ningxia_orders(fleet) == before  # nothing of the refused order was written
    place(fleet, tenant, key, **SICHUAN)  # the other site still sells
    place(fleet, tenant, key, sku="ascend910b-64g-x8", region="huawei-zone")  # no own workers
    by_site = {v.id: v for v in sites.list_sites(fleet, operator.principal)}
    assert (by_site["ningxia"].served, by_site["ningxia"].live_workers) == (False, 0)
    assert (by_site["sichuan"].served, by_site["sichuan"].live_workers) == (True, 1)
    assert by_site["huawei"].served and not by_site["huawei"].own_workers
    assert sites.live_by_site(fleet) == {"sichuan": 1, "ningxia": 0, "huawei": 0}
    with pytest.raises(CatalogError, match="unknown site 'mars'"):
        Worker(fleet, owner="w-mars", site="mars")


def test_a_site_s_servers_fetch_their_media_from_its_own_server(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, key: str,
) -> None:
    """Ningxia's servers are given Ningxia's media server; Sichuan's, the platform's."""
    near = "http://127.0.0.1:8099/ningxia-media"
    fleet.catalog = fleet.catalog.replaced(sites=tuple(
        s.model_copy(update={"media_base_url": near}) if s.id == "ningxia" else s
        for s in fleet.catalog.sites))
    given: dict[str, str] = {}
    for order in (NINGXIA, SICHUAN):
        iid = place(fleet, tenant, key, **order)
        with fleet.db.read() as s:
            node = s.scalars(select(Node).where(Node.instance_id == iid)).one()
            inst = s.get(Instance, iid)
            given[order["region"]] = step_input(s, fleet, node, inst).agent_media_url
    assert given["ningxia-1"] == f"{near}/agent-ramdisk.iso"
    assert given["sichuan-2"] == (f"{fleet.settings.media_base_url.rstrip('/')}"
                                  "/agent-ramdisk.iso")


def test_the_refusal_and_each_site_s_workers_are_said_over_http_the_cli_and_metrics(
    fleet: Platform, clock: MovableClock, server: LiveServer, tenant: TenantCtx,
    operator: TenantCtx, key: str,
) -> None:
    site_worker(fleet, "w-ningxia", "ningxia")  # then lost with its host
    site_worker(fleet, "w-sichuan", "sichuan")
    clock.move(minutes=5)
    workers.seen(fleet, "w-sichuan", 0)
    api = f"{server.url}/api/v1"
    order = {"ssh_keys": [key], **NINGXIA}
    refused = httpx.post(f"{api}/instances", headers=auth(tenant.token), json=order)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "60"
    assert "No worker of site ningxia" in refused.json()["detail"]
    said = httpx.post(f"{api}/instances", json=order, headers={
        **auth(tenant.token), "Accept-Language": "zh-CN"}).json()["detail"]
    assert "站点 ningxia 没有正在运行的工作进程" in said
    assert httpx.post(f"{api}/instances", headers=auth(tenant.token),
                      json={"ssh_keys": [key], **SICHUAN}).status_code == 201

    listed = httpx.get(f"{api}/sites", headers=auth(operator.token))
    assert {s["id"]: (s["live_workers"], s["served"]) for s in listed.json()["items"]} == {
        "sichuan": (1, True), "ningxia": (0, False), "huawei": (0, True)}
    assert httpx.get(f"{api}/sites", headers=auth(tenant.token)).status_code == 403
    metrics = httpx.get(f"{server.url}/metrics", headers=auth(operator.token)).text
    assert 'gpulease_site_live_workers{site="ningxia"} 0.0' in metrics
    assert 'gpulease_site_live_workers{site="sichuan"} 1.0' in metrics
    shown = CliRunner().invoke(app, ["workers", "--stopped"], env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token, "COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "refused (no worker)" in shown.output and "w-sichuan" in shown.output
