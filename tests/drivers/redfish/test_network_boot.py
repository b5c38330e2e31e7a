"""Offers that boot over the network instead of virtual media: UEFI HTTP boot of the image
URL, and PXE chained to the control plane's iPXE script and NoCloud seed; a full deploy and
release through the engine against the Redfish emulator, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import tomllib

import httpx
import pytest

from gpulease.domain.catalog import DEFAULT_CATALOG, CatalogError, parse_catalog
from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.simulated import BmcWatchingAgent
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import OrderRequest
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.fixtures.redfish import PASSWORD, USER

pytestmark = pytest.mark.slow
IMAGE = "ubuntu22.04-cuda12.4-pytorch2.5"


def booting_by(p: Platform, how: str) -> None:
    """The operator's catalog file says the H100 offer in ningxia-1 boots over the network."""
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    next(o for o in data["offers"] if (o["sku"], o["region"]) == (
        "h100-80g-x8", "ningxia-1"))["boot"] = how
    p.catalog = parse_catalog(data, "operator catalog")


def test_an_unknown_boot_mode_names_the_offer() -> None:
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    data["offers"][0]["boot"] = "floppy"
    with pytest.raises(CatalogError, match=r"\[\[offers\]\] #1 .*field 'boot'"):
        parse_catalog(data, "ops.toml")


def enroll_with_macs(p: Platform, emu: Emulator) -> dict[str, str]:
    macs = {}
    with p.db.write() as s:
        for i, _ in enumerate(emu.systems):
            inv = RedfishDriver(timeout_s=5).bmc(
                BmcEndpoint(f"n{i}", emu.system_url(i), USER, PASSWORD)).inventory()
            name = f"nb-h100-{i:02d}"
            macs[name] = (inv.nic_macs or ("",))[0]
            add_node(s, p, NodeSpec(
                name=name, sku="h100-80g-x8", region="ningxia-1",
                bmc_driver="redfish", bmc_address=emu.system_url(i), bmc_username=USER,
                bmc_password=PASSWORD,
                inventory_json=json.dumps({"bmc": {"nic_macs": list(inv.nic_macs or ())}})))
    return macs


def deploy(p: Platform, emu: Emulator, image_server: str, server: LiveServer,
           tenant: TenantCtx, key: str) -> tuple[str, str, str, str]:
    p.settings.public_url = server.url
    p.settings.media_base_url = image_server
    p.settings.poll_interval_s = 0.25
    macs = enroll_with_macs(p, emu)
    view, _ = orders.place_order(p, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key], name="nb-test"))
    Worker(p).run_until_idle(timeout_s=90)
    view = instances.show_instance(p, tenant.principal, view.id)
    assert view.status == "ready", view.status_reason
    node = view.nodes[0]
    return view.id, node.name, emu.systems[int(node.name[-2:])], macs[node.name]


def test_uefi_http_boot_chains_to_the_control_plane(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    booting_by(platform, "uefi_http")
    _, name, system_id, _ = deploy(platform, emulator, image_server, server, tenant, key)
    boot = emulator.get(f"/redfish/v1/Systems/{system_id}")["Boot"]
    # The emulator records UefiHttp without an HttpBootUri as Pxe ("can't force override");
    # either way the firmware's loader takes the network path to /media/ipxe.
    assert boot["BootSourceOverrideTarget"] in ("UefiHttp", "Pxe")
    agent = platform.drivers.agent_for("redfish")
    assert isinstance(agent, BmcWatchingAgent)
    assert agent.boots[name] == [f"{image_server}/{IMAGE}/vmlinuz"]
    assert agent.config_drives[name][0]  # the config drive also came on the virtual USB


def test_pxe_boot_chains_to_the_control_planes_script_and_seed(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    booting_by(platform, "pxe")
    iid, name, system_id, mac = deploy(platform, emulator, image_server, server, tenant, key)
    assert emulator.get(f"/redfish/v1/Systems/{system_id}")["Boot"][
        "BootSourceOverrideTarget"] == "Pxe"
    assert emulator.get(f"/redfish/v1/Systems/{system_id}/VirtualMedia/Cd")["Inserted"] is False
    agent = platform.drivers.agent_for("redfish")
    assert isinstance(agent, BmcWatchingAgent)
    # the server loaded its image's kernel from the script the control plane served it,
    # and its installer read the NoCloud seed: this instance's hostname
    assert agent.boots[name] == [f"{image_server}/{IMAGE}/vmlinuz"]
    assert "nb-test" in agent.seeds[name][0]

    # installed: the same MAC is now told to boot from its disk; a bad MAC is a 422
    script = httpx.get(f"{server.url}/media/ipxe", params={"mac": mac})
    assert script.status_code == 200 and "exit" in script.text
    assert "kernel" not in script.text
    bad = httpx.get(f"{server.url}/media/ipxe", params={"mac": "nope"})
    assert bad.status_code == 422 and bad.json()["field"] == "mac"
    assert httpx.get(f"{server.url}/media/nocloud/unknown/user-data").status_code == 404

    actions.release_instance(platform, tenant.principal, iid)
    Worker(platform).run_until_idle(timeout_s=90)
    assert instances.show_instance(platform, tenant.principal, iid).status == "released"
    assert agent.boots[name][-1] == f"{image_server}/agent-ramdisk/vmlinuz"  # cleaning
    assert agent.erased[name] == 1
