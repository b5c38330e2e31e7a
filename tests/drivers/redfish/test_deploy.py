"""A full deploy and release of a node over Redfish through the provisioning engine, on
SQLite and PostgreSQL, asserting what the emulator recorded."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.simulated import BmcWatchingAgent
from gpulease.platform import Platform
from gpulease.schemas import InstanceView, OrderRequest
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


def ordered_over_redfish(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> tuple[InstanceView, BmcWatchingAgent, Worker]:
    """The emulated servers enrolled, one ordered and run through its deploy: its view
    after, the stand-in agent that watched its BMC, and the worker."""
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
    return instances.show_instance(platform, tenant.principal, view.id), agent, worker


def test_deploy_and_release_over_redfish(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx, key: str,
    server: LiveServer,
) -> None:
    view, agent, worker = ordered_over_redfish(platform, emulator, image_server, tenant,
                                               key, server)
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


def test_a_card_repair_over_redfish_boots_the_tenants_own_system_back(
    platform: Platform, emulator: Emulator, image_server: str, tenant: TenantCtx,
    operator: TenantCtx, key: str, server: LiveServer,
) -> None:
    """The card path behind a real Redfish peer: the server goes out in the window its
    tenant accepted (powered off, disks kept), comes back from its own disk (no media, no
    ramdisk), its agent calls in, the burn-in passes and the tenant has it back."""
    import time
    from datetime import timedelta

    from gpulease.demo_agents import DemoAgents
    from gpulease.schemas.tickets import RepairWindowAnswer, RepairWindowProposal
    from gpulease.services.agents.node_agent import node_ref
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import card_repairs, repairs, tickets
    from gpulease.worker.jobs.fleet.safe_off import safe_off

    view, agent, worker = ordered_over_redfish(platform, emulator, image_server, tenant,
                                               key, server)
    node = view.nodes[0].name
    op = operator.principal
    node_changes.inject_faults(platform, op, node, ["xid79:3"])
    DemoAgents(platform).tick()
    (ticket,) = tickets.list_tickets(platform, op, tickets.OPEN).items
    start = platform.clock.now() + timedelta(seconds=1)
    card_repairs.propose_window(platform, op, ticket.id, RepairWindowProposal(
        start=start, hours=1))
    card_repairs.answer_window(platform, tenant.principal, ticket.id,
                               RepairWindowAnswer(accept=True))
    time.sleep(max((start - platform.clock.now()).total_seconds(), 0) + 0.1)
    assert card_repairs.begin_due_windows(platform) == 1
    assert safe_off(platform) == 1  # out for repair: powered off by its BMC
    system_id = emulator.systems[int(node[-2:])]
    for _ in range(100):  # the emulated server takes a moment to go off
        if emulator.get(f"/redfish/v1/Systems/{system_id}")["PowerState"] == "Off":
            break
        time.sleep(0.1)
    assert emulator.get(f"/redfish/v1/Systems/{system_id}")["PowerState"] == "Off"
    with platform.db.read() as s:
        row = s.scalar(select(Node).where(Node.name == node))
        assert row is not None
        ref = node_ref(platform, row)
    assert not agent.is_up(ref)  # asked while off, as any poll may: its agent is down
    repairs.finish(platform, op, node, "GPU 3: 1652200012 -> 1652200087")
    worker.run_until_idle(timeout_s=90)
    after = instances.show_instance(platform, tenant.principal, view.id)
    assert (after.status, after.stage) == ("ready", "ready"), after.stages[-3:]
    assert [(n.name, n.status) for n in after.nodes] == [(node, "active")]
    assert emulator.get(f"/redfish/v1/Systems/{system_id}")["PowerState"] == "On"
    assert agent.boots[node][-1] == "disk"  # its own system, not the ramdisk or an image
    assert not agent.erased.get(node)  # the tenant's disks kept
    assert tickets.show_ticket(platform, op, ticket.id).status == "mitigated"
