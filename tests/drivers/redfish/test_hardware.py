"""GPU, PCIe and chassis-thermal inventory over Redfish: against an 8-GPU server's mockup
served by sushy-static (the emulator lists none of these), and the emulator's own chassis
thermal; enrollment compares the GPUs with the offer. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.drivers.redfish_hardware import pcie_gen, vendor_of
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import EnrollRequest
from gpulease.services.fleet import enrollment, inventory
from gpulease.testing.callers import TenantCtx
from gpulease.testing.redfish_trees.mockup import StaticBmc, serve_mockup, write_mockup
from tests.fixtures.redfish import PASSWORD, USER

pytestmark = pytest.mark.slow


@pytest.fixture
def gpu_server(tmp_path: Path) -> Iterator[StaticBmc]:
    write_mockup(tmp_path / "mockup")
    bmc = serve_mockup(tmp_path / "mockup")
    yield bmc
    bmc.stop()


def test_lookup_tables() -> None:
    assert vendor_of(vendor_id="0x10DE") == "NVIDIA"
    assert vendor_of("Mellanox Technologies") == "NVIDIA Networking"
    assert vendor_of("Huawei Technologies Co., Ltd.") == "Huawei"
    assert vendor_of("Some New Vendor") == "Some New Vendor" and vendor_of() is None
    assert (pcie_gen("Gen5"), pcie_gen("PCIe Gen 4"), pcie_gen(None)) == (5, 4, None)


def test_gpus_pcie_links_and_chassis_thermal_from_the_bmc(gpu_server: StaticBmc) -> None:
    inv = RedfishDriver(timeout_s=5).bmc(
        BmcEndpoint("gpu-1", gpu_server.system_url, USER, PASSWORD)).inventory()
    assert inv.manufacturer == "Inspur" and inv.memory_gib == 2048
    assert inv.gpus is not None and len(inv.gpus) == 8
    assert {(g.vendor, g.model, g.source) for g in inv.gpus} == {
        ("NVIDIA", "NVIDIA H100 80GB HBM3", "processors")}
    assert inv.gpus[0].serial == "165322000000"
    pcie = inv.pcie_devices or ()
    assert [d.kind for d in pcie].count("gpu") == 8 and [d.kind for d in pcie].count(
        "network") == 4
    slow = next(d for d in pcie if d.name == "GPU3")
    assert (slow.gen, slow.lanes, slow.max_gen, slow.max_lanes) == (4, 8, 5, 16)
    assert {d.vendor for d in pcie if d.kind == "network"} == {"NVIDIA Networking"}
    temps = {t.name: t for t in inv.temperatures or ()}
    assert temps["GPU0 Temp"].celsius == 40 and temps["Inlet Temp"].upper_critical == 45
    assert temps["PSU2 Temp"].health == "Critical"
    assert [f.reading for f in inv.fans or ()] == [9000, 9100, 9200, 9300]
    assert {f.units for f in inv.fans or ()} == {"RPM"}
    assert "storage" in inv.unknown and "gpus" not in inv.unknown


def test_the_emulator_reports_its_thermal_and_no_gpus(emulator: Emulator) -> None:
    inv = RedfishDriver(timeout_s=5).bmc(
        BmcEndpoint("n", emulator.system_url(0), USER, PASSWORD)).inventory()
    assert inv.gpus is None and "gpus" in inv.unknown  # unknown, not zero
    assert inv.temperatures and any(t.name == "CPU Temp" for t in inv.temperatures)


def test_enrollment_checks_gpus_and_notes_links_and_heat(
    platform: Platform, operator: TenantCtx, gpu_server: StaticBmc, tmp_path: Path
) -> None:
    node = enrollment.enroll(platform, operator.principal, EnrollRequest(
        bmc=gpu_server.system_url, username=USER, password=PASSWORD,
        offer="h100-80g-x8@ningxia-1", name="inspur-01"))
    assert node.status == "available"
    detail = inventory.get_node(platform, operator.principal, node.id)
    record = detail.inventory or {}
    comparison = record["comparison"]
    assert "GPUs" in comparison["checked"] and "memory" in comparison["checked"]
    notes = " ".join(comparison["notes"])
    assert "GPU3 links at Gen4 x8 of Gen5 x16" in notes and "PSU2 Temp 96 °C" in notes
    assert len(record["bmc"]["gpus"]) == 8 and record["bmc"]["fans"]

    seven = tmp_path / "seven"
    write_mockup(seven, gpus=7, slow_slot=None, hot_psu=False, serial="INSP-H100-0007")
    short = serve_mockup(seven)
    try:
        odd = enrollment.enroll(platform, operator.principal, EnrollRequest(
            bmc=short.system_url, username=USER, password=PASSWORD,
            offer="h100-80g-x8@ningxia-1", name="inspur-02"))
    finally:
        short.stop()
    assert odd.status == "enrolling"
    assert "7 GPUs, offer says 8" in (odd.status_reason or "")
