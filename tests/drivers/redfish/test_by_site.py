"""Two data centres, each with its own Redfish BMCs (a sushy-tools emulator each, behind a
proxy that logs every request with the User-Agent that names its worker) and its own
worker, running as threads on PostgreSQL: each site's servers are deployed by its worker
only, no worker ever calls a BMC of the other site, and once Ningxia's worker is gone its
orders are refused while Sichuan's worker releases its own server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.domain.errors import Unavailable
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.bmc_witness import RecordingProxy
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.fixtures.redfish import PASSWORD, USER, start_emulator

pytestmark = pytest.mark.slow

SITES = {"ningxia": ("ningxia-1", "h100-80g-x8"), "sichuan": ("sichuan-1", "a100-80g-x8")}


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[dict[str, tuple[Emulator, RecordingProxy]]]:
    made = {}
    for site in SITES:
        emu = start_emulator(tmp_path / f"bmc-{site}", count=1)
        made[site] = (emu, RecordingProxy(int(emu.url.rsplit(":", 1)[1])))
    yield made
    for emu, proxy in made.values():
        proxy.stop()
        emu.stop()


def enroll(p: Platform, bmcs: dict[str, tuple[Emulator, RecordingProxy]]) -> None:
    with p.db.write() as s:
        for site, (region, sku) in SITES.items():
            emu, proxy = bmcs[site]
            fabric = f"ib-{region}-site"
            inventory.ensure_fabric(s, fabric, region)
            s.flush()
            add_node(s, p, NodeSpec(
                name=f"rf-{site}-00", sku=sku, region=region, fabric_id=fabric,
                bmc_driver="redfish", bmc_address=emu.system_url(0).replace(
                    emu.url, f"http://127.0.0.1:{proxy.port}"),
                bmc_username=USER, bmc_password=PASSWORD))


def wait_status(p: Platform, t: TenantCtx, iid: str, status: str, timeout_s: float = 150
                ) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded
        view = instances.show_instance(p, t.principal, iid)
        if view.status == status:
            return
        time.sleep(0.25)
    raise AssertionError(f"{iid} is {view.status} ({view.status_reason}), not {status}")


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_each_site_s_worker_alone_calls_its_site_s_bmcs(
    platform: Platform, bmcs: dict[str, tuple[Emulator, RecordingProxy]], image_server: str,
    tenant: TenantCtx, key: str, server: LiveServer,
) -> None:
    p = platform
    p.settings.public_url, p.settings.media_base_url = server.url, image_server
    p.settings.poll_interval_s = 0.25
    enroll(p, bmcs)
    workers = {site: Worker(p, owner=f"w-{site}", site=site) for site in SITES}
    for worker in workers.values():
        worker.start(1)
    try:
        ordered = {site: orders.place_order(p, tenant.principal, OrderRequest(
            sku=sku, region=region, ssh_keys=[key]))[0].id
            for site, (region, sku) in SITES.items()}
        for iid in ordered.values():
            wait_status(p, tenant, iid, "ready")
        workers["ningxia"].stop()  # its host lost
        with pytest.raises(Unavailable, match="No worker of site ningxia"):
            orders.place_order(p, tenant.principal, OrderRequest(
                sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
        called_ningxia = len(bmcs["ningxia"][1].requests)
        actions.release_instance(p, tenant.principal, ordered["sichuan"])
        wait_status(p, tenant, ordered["sichuan"], "released")
    finally:
        for worker in workers.values():
            worker.stop()

    for site, (_, proxy) in bmcs.items():
        assert proxy.requests, f"{site}'s BMC was never called"
        unnamed = [r for r in proxy.requests if "(worker " not in r[0]]
        assert not unnamed, unnamed[:3]  # every call says which worker made it
        assert proxy.workers() == {f"w-{site}"}, (site, proxy.workers())
    assert len(bmcs["ningxia"][1].requests) == called_ningxia  # nobody took Ningxia's work
