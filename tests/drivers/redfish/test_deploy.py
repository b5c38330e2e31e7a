"""A full deploy and release of a node over Redfish through the provisioning engine, on
SQLite and PostgreSQL, asserting what the emulator recorded."""

from __future__ import annotations

import pytest

from gpulease.db.tables import Node
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.simulated import BmcWatchingAgent
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker
from tests.fixtures.redfish import PASSWORD, USER

pytestmark = pytest.mark.slow


def enroll_emulated(p: Platform, emu: Emulator) -> list[str]:
    names = []
    with p.db.write() as s:
        inventory.ensure_fabric(s, "ib-ningxia-1-1", "ningxia-1")
        s.flush()
        for i, _ in enumerate(emu.systems):
            name = f"rf-h100-{i:02d}"
            add_node(s, p, NodeSpec(
                name=name, sku="h100-80g-x8", region="ningxia-1", fabric_id="ib-ningxia-1-1",
                bmc_driver="redfish", bmc_address=emu.system_url(i), bmc_username=USER,
                bmc_password=PASSWORD))
            names.append(name)
    return names


def test_deploy_and_release_over_redfish(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    platform.settings.public_url = server.url
    platform.settings.media_base_url = image_server
    platform.settings.poll_interval_s = 0.25
    enroll_emulated(platform, emulator)
    agent = platform.drivers.agent_for("redfish")
    assert isinstance(agent, BmcWatchingAgent)
    worker = Worker(platform)

    view, _ = orders.place_order(platform, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    worker.run_until_idle(timeout_s=90)
    view = instances.show_instance(platform, tenant.principal, view.id)
    assert view.status == "ready", view.status_reason
    node = view.nodes[0]
    system_id = emulator.systems[int(node.name[-2:])]
    system = emulator.get(f"/redfish/v1/Systems/{system_id}")
    assert system["PowerState"] == "On"
    assert system["Boot"]["BootSourceOverrideTarget"] == "Cd"
    cd = emulator.get(f"/redfish/v1/Systems/{system_id}/VirtualMedia/Cd")
    assert cd["Inserted"] is False  # ejected after the install
    image = f"{image_server}/ubuntu22.04-cuda12.4-pytorch2.5.iso"
    assert agent.boots[node.name] == [image]  # the server booted the tenant's image
    (drive,) = agent.config_drives[node.name]  # with its config drive beside it
    assert drive and drive.startswith(f"{platform.settings.public_url}/media/config/")

    actions.release_instance(platform, tenant.principal, view.id)
    worker.run_until_idle(timeout_s=90)
    assert instances.show_instance(platform, tenant.principal, view.id).status == "released"
    system = emulator.get(f"/redfish/v1/Systems/{system_id}")
    assert system["PowerState"] == "Off"
    assert agent.boots[node.name][-1] == f"{image_server}/agent-ramdisk.iso"
    assert agent.erased[node.name] == 1
    with platform.db.read() as s:
        row = s.get(Node, node.id)
        assert row is not None and row.status == "available" and row.instance_id is None


def test_wrong_bmc_password_sends_the_node_to_maintenance_with_the_bmcs_word(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    platform.settings.public_url = server.url
    platform.settings.media_base_url = image_server
    names = enroll_emulated(platform, emulator)
    with platform.db.write() as s:
        for n in s.query(Node).filter(Node.name.in_(names)):
            n.bmc_password_enc = platform.box.seal("wrong")
    view, _ = orders.place_order(platform, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    Worker(platform).run_until_idle(timeout_s=60)
    view = instances.show_instance(platform, tenant.principal, view.id)
    assert view.status == "failed"
    assert "refused the credentials" in (view.status_reason or "")
    with platform.db.read() as s:
        node = s.get(Node, view.nodes[0].id)
        assert node is not None and node.status == "maintenance"
        assert "power_off failed" in (node.status_reason or "")


def test_an_unreachable_image_fails_with_the_bmcs_message(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    platform.settings.public_url = server.url
    platform.settings.media_base_url = image_server + "/missing"
    enroll_emulated(platform, emulator)
    view, _ = orders.place_order(platform, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    Worker(platform).run_until_idle(timeout_s=60)
    view = instances.show_instance(platform, tenant.principal, view.id)
    assert view.status == "failed"
    assert "attach_media failed" in (view.status_reason or "")
    assert "Cannot download virtual media" in (view.status_reason or "")
