"""A lab server ordered through the platform, as a tenant would: enrolled through its
Redfish BMC, deployed by the image-based pipeline (the deploy ramdisk fetches its plan from
the control plane, checks and writes the image, reports; the server boots from disk with
its config drive, which carries no credential of the tenant's), delivered only once the
real agent on the installed system has enrolled, passed verify and then, at configure, put
the tenant's key and password in place; the `ssh` line the platform shows logs the tenant in with
their key (the one-time password is the one in /etc/shadow, /data is mounted, the agent
runs). Released: the ramdisk erases both disks, a certificate per disk is issued, and the
host reads both disk files back and finds no data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from gpulease.osimage import build as images
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.agents.evidence import acceptance_reports, instance_certificates
from gpulease.services.instances import actions, views
from gpulease.services.orders import ordering
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.lab_platform import LabPlatform, lab_platform, wait_for
from tests.fixtures.lab import IMAGE_CACHE, allocated_data, need_libvirt, ssh_in, tenant_key

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

BUDGET_S = 1500  # TCG: the ramdisk's write (~1 GB), then the first boot and the agent


@pytest.fixture
def lab(tmp_path: Path, lab_folder: Path) -> Iterator[LabPlatform]:
    need_libvirt()
    images.build(IMAGE_CACHE)  # the cached image, or built once
    with lab_platform(lab_folder, tmp_path, IMAGE_CACHE, BUDGET_S) as made:
        yield made



def _released(p: Platform, tenant: TenantCtx, iid: str) -> list[dict[str, Any]]:
    """Hand the instance back; once released, its erase certificates."""
    actions.release_instance(p, tenant.principal, iid)
    view = wait_for(lambda: views.show_instance(p, tenant.principal, iid),
                    lambda v: v.status in ("released", "failed"), BUDGET_S)
    assert view.status == "released", (view.status, view.status_reason)
    certificates, total = instance_certificates(p, tenant.principal, iid)
    assert total == len(certificates)
    return certificates


def test_a_lab_server_ordered_is_delivered_logged_into_released_and_erased(
        lab: LabPlatform, tmp_path: Path) -> None:
    p = lab.p
    key = tenant_key(tmp_path)
    (enrolled,) = lab.enrolled
    assert enrolled.endswith(": available"), enrolled
    tenant = new_tenant(p)
    iid = ordering.place_order(p, tenant.principal, OrderRequest(
        sku="lab-vm-x1", region="lab", name="tenant-box",
        ssh_keys=[key.with_suffix(".pub").read_text().strip()]))[0].id
    view = wait_for(lambda: views.show_instance(p, tenant.principal, iid),
                    lambda v: v.status in ("ready", "failed"), BUDGET_S)
    assert view.status == "ready", (view.status, view.status_reason, [
        (s.stage, s.message) for s in view.stages])
    stages = [s.stage for s in view.stages]
    for stage in ("attach_media", "write_image", "boot_disk", "wait_agent", "verify",
                  "configure"):
        assert stage in stages, stages
    # the acceptance ran before the tenant's keys and password went on the server
    assert stages.index("verify") < stages.index("configure"), stages

    # the ssh line shown to the tenant: the lab's loopback forward
    port = int(str(lab.lab.servers[0]["ssh_port"]))
    assert view.ssh_command == f"ssh -p {port} root@127.0.0.1"
    password = actions.reveal_credentials(p, tenant.principal, iid).root_password
    (report,) = acceptance_reports(p, tenant.principal, iid)
    assert report["passed"] and report["simulated"]  # the agent's simulated GPU
    facts = ssh_in(key, port, "hostname; findmnt -n -o SOURCE /data; "
                            "getent shadow root | cut -d: -f2; "
                            "systemctl is-active gpulease-agent; "
                            "echo TENANT-SECRET > /data/secret; sync")
    hostname, data, root_hash, agent = facts.split()
    assert hostname == "tenant-box" and data == "/dev/vdb1" and agent == "active"
    assert bcrypt.checkpw(password.encode(), root_hash.encode())

    certificates = _released(p, tenant, iid)
    assert len(certificates) == 2 and all(c["passed"] for c in certificates), certificates
    assert sorted(c["device"] for c in certificates) == ["/dev/vda", "/dev/vdb"]
    name = str(lab.lab.servers[0]["name"])
    pool = Path(lab.lab.folder) / "pool"
    for disk in (pool / f"{name}-system.qcow2", pool / f"{name}-data.qcow2"):
        assert allocated_data(disk) == [], disk.name  # nothing the tenant left


@pytest.fixture
def lab_of_two(tmp_path: Path, lab_folder: Path) -> Iterator[LabPlatform]:
    need_libvirt()
    images.build(IMAGE_CACHE)
    with lab_platform(lab_folder, tmp_path, IMAGE_CACHE, BUDGET_S, servers=2) as made:
        yield made


def link_local(mac: str) -> str:
    """The IPv6 link-local address a NIC makes from its MAC (EUI-64)."""
    octets = [int(o, 16) for o in mac.split(":")]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
    return "fe80::" + ":".join(f"{eui[i] << 8 | eui[i + 1]:x}" for i in range(0, 8, 2))


def test_a_cluster_order_lands_on_the_lab_fabric_and_its_servers_reach_each_other(
        lab_of_two: LabPlatform, tmp_path: Path) -> None:
    """Two lab servers, enrolled on the lab's fabric, ordered as one cluster: both
    delivered side by side, each with its own ssh line; the first finds the second's own
    host key at its link-local address on the fabric; released, all four disks certified."""
    p, lab = lab_of_two.p, lab_of_two.lab
    key = tenant_key(tmp_path)
    tenant = new_tenant(p)
    iid = ordering.place_order(p, tenant.principal, OrderRequest(
        kind="cluster", nodes=2, sku="lab-vm-x1", region="lab",
        ssh_keys=[key.with_suffix(".pub").read_text().strip()]))[0].id
    view = wait_for(lambda: views.show_instance(p, tenant.principal, iid),
                    lambda v: v.status in ("ready", "failed"), BUDGET_S)
    assert view.status == "ready", (view.status, view.status_reason)
    assert view.fabric_id == f"{lab.name}-fabric"
    ports = {str(s["name"]): int(str(s["ssh_port"])) for s in lab.servers}
    assert sorted(n.ssh_command or "" for n in view.nodes) == sorted(
        f"ssh -p {port} root@127.0.0.1" for port in ports.values())
    first, second = (str(s["name"]) for s in lab.servers)
    second_host_key = ssh_in(key, ports[second],
                           "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    peer = link_local(str(lab.servers[1]["fabric_mac"]))
    seen = ssh_in(key, ports[first], f"ssh-keyscan -T 20 -t ed25519 {peer}%eth1 2>/dev/null")
    assert second_host_key in seen, seen

    certificates = _released(p, tenant, iid)
    assert len(certificates) == 4 and all(c["passed"] for c in certificates), certificates
