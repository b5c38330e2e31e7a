"""Network boot leaks nothing to whoever knows a MAC: the iPXE script and the NoCloud seed
answer only the boot network, and only the deploying node's own boot address when it has
one; the seed is named by a per-deploy random id and lives only while that deploy runs; its
one-time agent token dies with the deploy. The callers' addresses are given, never sent
to. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import secrets

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from gpulease.api.app import create_app
from gpulease.configdrive import ConfigDriveSpec, build_iso
from gpulease.db.tables import AgentEnrollment, ConfigDrive, Node
from gpulease.domain.errors import Forbidden, NotFound
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.security import hash_token
from gpulease.services.agents.credentials import mint_enrollment
from gpulease.services.fleet import netboot
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, ssh_key
from gpulease.worker.pipelines.node_inputs import drop_config_drives

MAC = "52:54:00:12:34:56"
BOOT_NET = "10.20.0.0/16"
NODE_ADDRESS, NEIGHBOUR, OUTSIDE = "10.20.0.7", "10.20.0.8", "198.51.100.9"


def _deploying(p: Platform, t: TenantCtx, boot_address: str | None) -> tuple[str, str]:
    """The only node, ordered and mid-deploy with its config drive: (node id, drive id)."""
    token = "glat_" + secrets.token_urlsafe(32)
    with p.db.write() as s:
        add_node(s, p, NodeSpec(
            name="pxe-01", sku="h100-80g-x8", region="ningxia-1", boot_address=boot_address,
            inventory_json=json.dumps({"bmc": {"nic_macs": [MAC.upper()]}})))
    iid = orders.place_order(p, t.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[ssh_key()]))[0].id
    with p.db.write() as s:
        node = s.scalar(select(Node).where(Node.instance_id == iid))
        assert node is not None
        s.execute(update(Node).where(Node.id == node.id).values(status="deploying"))
        drive = secrets.token_urlsafe(32)
        s.add(ConfigDrive(id=drive, node_id=node.id, instance_id=iid, created_at=p.clock.now(),
                          agent_token_hash=hash_token(token), iso=build_iso(ConfigDriveSpec(
                              "i-test", "pxe-test", agent_url="http://cp",
                              agent_token=token))))
        mint_enrollment(s, node.id, None, p.clock.now(), token=token)
        return node.id, drive


@pytest.fixture
def boot_network(platform: Platform) -> Platform:
    platform.settings.boot_networks = [BOOT_NET]
    return platform


def test_only_the_deploying_node_gets_its_script_and_seed(boot_network: Platform,
                                                           tenant: TenantCtx) -> None:
    p = boot_network
    node_id, drive = _deploying(p, tenant, NODE_ADDRESS)
    # Off the boot network: refused outright.
    with pytest.raises(Forbidden, match="GPULEASE_BOOT_NETWORKS"):
        netboot.ipxe_script(p, MAC, OUTSIDE)
    with pytest.raises(Forbidden):
        netboot.nocloud_file(p, drive, "user-data", OUTSIDE)
    # On it, but not the node's address: the answer for a MAC with nothing to install.
    neighbour = netboot.ipxe_script(p, MAC, NEIGHBOUR)
    assert neighbour == netboot.LOCAL_DISK and drive not in neighbour
    with pytest.raises(NotFound):
        netboot.nocloud_file(p, drive, "user-data", NEIGHBOUR)
    # The node itself: its kernel and the seed under the deploy's random id.
    script = netboot.ipxe_script(p, MAC, NODE_ADDRESS)
    assert f"/media/nocloud/{drive}/" in script and MAC not in script
    assert "GPULEASE_AGENT_TOKEN=glat_" in netboot.nocloud_file(p, drive, "user-data",
                                                                NODE_ADDRESS)
    # Deployed: the drive goes, and its one-time token with it, unused or not.
    with p.db.write() as s:
        drop_config_drives(s, node_id)
        s.execute(update(Node).where(Node.id == node_id).values(status="active"))
    with p.db.read() as s:
        assert s.scalar(select(AgentEnrollment).where(AgentEnrollment.node_id == node_id)) is None
    with pytest.raises(NotFound):
        netboot.nocloud_file(p, drive, "user-data", NODE_ADDRESS)
    assert netboot.ipxe_script(p, MAC, NODE_ADDRESS) == netboot.LOCAL_DISK


def test_a_site_s_servers_boot_only_from_its_own_boot_networks(
    boot_network: Platform, tenant: TenantCtx,
) -> None:
    """Both data centres' boot networks are the platform's; the Ningxia node (no boot
    address) is answered from Ningxia's, never from Sichuan's, script and seed alike."""
    p = boot_network
    p.settings.boot_networks = ["10.0.0.0/8"]
    ningxia, sichuan = "10.20.0.0/16", "10.30.0.0/16"
    p.catalog = p.catalog.replaced(sites=tuple(
        s.model_copy(update={"boot_networks": (ningxia if s.id == "ningxia" else sichuan,)})
        for s in p.catalog.sites))
    _, drive = _deploying(p, tenant, None)
    assert drive in netboot.ipxe_script(p, MAC, NEIGHBOUR)  # 10.20.0.8: Ningxia's own
    assert netboot.ipxe_script(p, MAC, "10.30.0.8") == netboot.LOCAL_DISK
    with pytest.raises(NotFound):
        netboot.nocloud_file(p, drive, "user-data", "10.30.0.8")
    assert "GPULEASE_AGENT_TOKEN=" in netboot.nocloud_file(p, drive, "user-data", NEIGHBOUR)


def test_a_node_without_a_boot_address_is_served_on_the_boot_network_only(
    boot_network: Platform, tenant: TenantCtx,
) -> None:
    p = boot_network
    _, drive = _deploying(p, tenant, None)
    assert drive in netboot.ipxe_script(p, MAC, NEIGHBOUR)
    with pytest.raises(Forbidden):
        netboot.ipxe_script(p, MAC, OUTSIDE)
    # Over HTTP, an address off the boot network (the test client's) gets a 403 problem.
    with TestClient(create_app(p)) as client:
        r = client.get("/media/ipxe", params={"mac": MAC})
        assert r.status_code == 403 and "boot network" in r.json()["detail"]
        r = client.get(f"/media/nocloud/{drive}/user-data")
        assert r.status_code == 403 and drive not in r.text
