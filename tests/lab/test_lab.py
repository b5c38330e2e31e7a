"""The lab for real: QEMU/libvirt domains behind sushy-tools' libvirt driver, enrolled
through the ordinary Redfish enrollment, powered through their BMC, and removed again
without touching anyone else's domain."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.compose import make_platform
from gpulease.domain.catalog import read_catalog_text
from gpulease.domain.states import NodeStatus
from gpulease.lab import lab as labs
from gpulease.lab import machines
from gpulease.lab.accel import detect
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import EnrollRequest
from gpulease.services.fleet.enrollment import enroll
from gpulease.testing.callers import new_operator
from gpulease.testing.platforms import make_settings, start_migrated
from gpulease.testing.servers import free_port
from tests.fixtures.lab import need_libvirt

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]


@pytest.fixture
def foreign() -> Iterator[str]:
    """A domain that is not the lab's (no lab mark): `lab down` must leave it."""
    need_libvirt()
    import libvirt

    name = f"foreign-{uuid.uuid4().hex[:6]}"
    conn = libvirt.open(machines.LIBVIRT_URI)
    conn.defineXML(f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>"
                   "<os><type arch='x86_64'>hvm</type></os></domain>")
    yield name
    conn.lookupByName(name).undefine()
    conn.close()


def test_a_lab_server_enrolls_by_its_redfish_bmc_powers_for_real_and_goes_away_alone(
        db_url: str, tmp_path: Path, lab_folder: Path, foreign: str) -> None:
    folder = lab_folder
    import libvirt

    name = f"lab{uuid.uuid4().hex[:6]}"
    lab = labs.up(folder, labs.Plan(servers=2, bmc_port=free_port(),
                                    first_ssh_port=free_port(), name=name, accel="tcg"))
    try:
        assert [s["name"] for s in lab.servers] == [f"{name}-01", f"{name}-02"]
        assert lab.accel == "tcg" and "GPULEASE_LAB_ACCEL" in lab.accel_why
        assert (folder / "lab.json").stat().st_mode & 0o077 == 0  # it holds the password
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(labs.catalog_text(read_catalog_text(None)))
        start_migrated(db_url)
        p = make_platform(make_settings(db_url, tmp_path / "data", catalog_file=catalog))
        try:
            operator = new_operator(p)
            server = lab.servers[0]
            node = enroll(p, operator.principal, EnrollRequest(
                bmc=lab.system_url(server), username=lab.username, password=lab.password,
                offer=labs.LAB_OFFER, name=str(server["name"])))
            assert node.status == NodeStatus.AVAILABLE, node.status_reason
            with p.db.read() as s:
                from gpulease.db.tables import Node

                record = json.loads(s.get(Node, node.id).inventory_json)  # type: ignore[union-attr]
            assert record["bmc"]["memory_gib"] == 1.0
            assert [d["capacity_bytes"] for d in record["bmc"]["drives"]] == [10**10, 10**10]
            assert {"memory", "drives"} <= set(record["comparison"]["checked"])
            assert record["bmc"]["uuid"] == server["uuid"]

            bmc = p.drivers.bmc_for("redfish", BmcEndpoint(
                node.name, lab.system_url(server), lab.username, lab.password))
            bmc.power_on()
            assert machines.power_state(str(server["name"])) == "On"
            assert machines.power_state(str(lab.servers[1]["name"])) == "Off"
            bmc.power_off()
            assert machines.power_state(str(server["name"])) == "Off"
        finally:
            p.close()
    finally:
        removed = labs.down(folder)
    assert removed == [f"{name}-01", f"{name}-02"]
    conn = libvirt.open(machines.LIBVIRT_URI)
    try:
        names = {d.name() for d in conn.listAllDomains(0)}
        pools = {pl.name() for pl in conn.listAllStoragePools(0)}
    finally:
        conn.close()
    assert foreign in names and not any(n.startswith(name) for n in names)
    assert machines.pool_name(name) not in pools
    assert not (folder / "pool").exists() and labs.load(folder) is None


def test_a_lab_folder_qemu_cannot_reach_is_refused_before_anything_is_made(
        tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(RuntimeError, match="chmod o\\+x"):
        machines.reachable_by_qemu(private / "lab")


def test_the_accelerator_is_tcg_unless_a_kernel_really_runs_under_kvm(tmp_path: Path) -> None:
    assert detect(None, "kvm").kind == "kvm"  # the operator's word
    assert detect(None, "tcg").kind == "tcg"
    unprobed = detect(None)
    assert unprobed.kind == "tcg" and unprobed.domain_type == "qemu"
    not_a_kernel = tmp_path / "vmlinuz-none"
    not_a_kernel.write_bytes(b"\0" * 4096)
    chosen = detect(not_a_kernel)
    assert chosen.kind == "tcg", chosen.why  # nothing printed: never KVM on a guess
