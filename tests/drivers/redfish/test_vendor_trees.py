"""Enrollment against Redfish trees shaped as vendors publish them (tests/drivers/
vendor_trees.py), served over real HTTP by sushy-static: inventory read wherever the
vendor puts it, the offer compared model by model and drive by drive, and a server is
enrolled once whatever its URL's spelling, without being touched when refused. The pure
rules (identity, makers, GPU models, drive sizes) are checked without a BMC. SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from gpulease.domain.errors import Conflict
from gpulease.domain.fleet.enrollment import GpuModel, bmc_key, gpu_model_difference, identity
from gpulease.drivers.redfish import RedfishBmc, RedfishDriver
from gpulease.drivers.redfish_hardware import maker_key, vendor_of
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.schemas import EnrollRequest
from gpulease.services.fleet import enrollment, inventory
from gpulease.testing.callers import TenantCtx
from gpulease.testing.redfish_trees.mockup import StaticBmc, serve_mockup
from gpulease.testing.redfish_trees.vendor_trees import (
    write_dell_like,
    write_huawei_like,
    write_supermicro_like,
)
from tests.fixtures.redfish import PASSWORD, USER

H100 = GpuModel("NVIDIA H100 SXM 80GB", 80)


def test_one_spelling_per_bmc_and_one_identity_per_server() -> None:
    same = {bmc_key(a) for a in (
        "https://BMC-1.example/redfish/v1/Systems/1/", "http://bmc-1.example:443/redfish/v1"
        "/Systems/1", "https://bmc-1.example//redfish/v1//Systems/1")}
    assert same == {"bmc-1.example/redfish/v1/Systems/1"}
    assert bmc_key("https://bmc-1.example/") == bmc_key("http://bmc-1.example/redfish/v1")
    assert bmc_key("http://127.0.0.1:8000/redfish/v1/Systems/a") != bmc_key(
        "http://127.0.0.1:8000/redfish/v1/Systems/b")  # an emulator: many systems, one port
    assert identity(" CN7X9X2 ") == "cn7x9x2"
    assert identity("To Be Filled By O.E.M.") is None
    assert identity("00000000-0000-0000-0000-000000000000") is None


def test_makers_and_gpu_models_as_bmcs_spell_them() -> None:
    for spelled in ("Nvidia(R) Corporation", "NVIDIA Corp.", "nvidia", "NVIDIA Corporation"):
        assert vendor_of(spelled) == "NVIDIA", spelled
    assert maker_key("Huawei Technologies Co., Ltd.") == "huawei"
    assert vendor_of("Something Else Inc.", "0x10DE") == "NVIDIA"  # the PCI id decides
    assert gpu_model_difference(("NVIDIA H100 80GB HBM3",) * 8, H100) is True
    assert gpu_model_difference(("H100 SXM5 80GB",), H100) is True
    a100 = gpu_model_difference(("NVIDIA A100-SXM4-80GB",) * 8, H100)
    assert a100 == "GPU model 8 × NVIDIA A100-SXM4-80GB, offer says NVIDIA H100 SXM 80GB"
    assert gpu_model_difference(("GPU", "3D controller"), H100) is None  # says nothing
    pcie = gpu_model_difference(("NVIDIA H100 PCIe",) * 8, H100)  # no NVLink at 900 GB/s
    assert pcie == "GPU model 8 × NVIDIA H100 PCIe, offer says NVIDIA H100 SXM 80GB"
    assert gpu_model_difference(("NVIDIA H100 NVL 94GB",), H100) is not True
    rtx24 = GpuModel("NVIDIA GeForce RTX 4090 24GB", 24)
    assert isinstance(gpu_model_difference(("NVIDIA GeForce RTX 4090 48GB",), rtx24), str)
    assert gpu_model_difference(("GeForce RTX 4090",), rtx24) is True


@pytest.fixture
def dell(tmp_path: Path) -> Iterator[StaticBmc]:
    write_dell_like(tmp_path / "dell")
    bmc = serve_mockup(tmp_path / "dell")
    yield bmc
    bmc.stop()


def _url(bmc: StaticBmc, system: str = "System.Embedded.1") -> str:
    return f"{bmc.url}/redfish/v1/Systems/{system}"


def test_a_dell_like_tree_reads_whole_and_matches(dell: StaticBmc) -> None:
    bmc = RedfishDriver(timeout_s=5).bmc(BmcEndpoint("xe9680", _url(dell), USER, PASSWORD))
    inv = bmc.inventory()
    assert inv.gpus is not None and len(inv.gpus) == 8  # from the chassis' PCIe devices
    assert {g.vendor for g in inv.gpus} == {"NVIDIA"} and inv.gpus[0].source == "pcie"
    assert (inv.processor_count, inv.cpu_cores, inv.cpu_threads) == (2, 96, None)
    assert inv.processor_model == "Intel(R) Xeon(R) Platinum 8468"
    assert inv.nic_macs == ("b0:7b:25:aa:00:01", "b0:7b:25:aa:00:02")  # no VLAN, no USB NIC
    assert inv.drives is not None and [d.capacity_bytes for d in inv.drives] == [
        7_681_501_126_656] * 2  # the controller without MemberId does not hide them
    assert inv.uuid is not None and inv.serial == "CN7X9X2"
    assert inv.virtual_media == ("CD", "DVD", "USBStick")
    assert inv.boot_targets is not None and "UefiHttp" in inv.boot_targets


def test_a_server_is_enrolled_once_whatever_its_url_and_untouched_when_refused(
    platform: Platform, operator: TenantCtx, dell: StaticBmc,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = enrollment.enroll(platform, operator.principal, EnrollRequest(
        bmc=_url(dell), username=USER, password=PASSWORD, offer="h100-80g-x8@ningxia-1"))
    assert node.status == "available", node.status_reason
    record = inventory.get_node(platform, operator.principal, node.id).inventory or {}
    assert {"GPUs", "GPU model", "drives", "virtual media"} <= set(
        record["comparison"]["checked"])

    powered: list[str] = []
    monkeypatch.setattr(RedfishBmc, "power_off", lambda self: powered.append("off"))
    spellings = [_url(dell) + "/", _url(dell).replace("http://", "HTTP://"),
                 _url(dell).replace("127.0.0.1", "localhost")]  # the same server by serial
    for spelled in spellings:
        with pytest.raises(Conflict, match=f"enrolled already as node {node.name}"):
            enrollment.enroll(platform, operator.principal, EnrollRequest(
                bmc=spelled, username=USER, password=PASSWORD,
                offer="h100-80g-x8@ningxia-1", name="another-name"))
    assert powered == []  # refused before anything changed on the server
    nodes = inventory.list_nodes(platform, operator.principal).items
    assert [n.id for n in nodes if n.name == "another-name"] == []


def test_a_supermicro_like_tree_of_another_gpu_and_small_drives_is_held_back(
    platform: Platform, operator: TenantCtx, tmp_path: Path,
) -> None:
    write_supermicro_like(tmp_path / "smc")
    bmc = serve_mockup(tmp_path / "smc")
    try:
        node = enrollment.enroll(platform, operator.principal, EnrollRequest(
            bmc=f"{bmc.url}/redfish/v1/Systems/1", username=USER, password=PASSWORD,
            offer="h100-80g-x8@ningxia-1"))
    finally:
        bmc.stop()
    assert node.status == "enrolling"
    reason = node.status_reason or ""
    assert "GPU model 8 × NVIDIA A100-SXM4-80GB, offer says NVIDIA H100 SXM 80GB" in reason
    assert "offer says 2 × 7.6 TB NVMe, 0 found" in reason and "0.48 TB" in reason
    assert "no virtual USB slot" in reason
    record = inventory.get_node(platform, operator.principal, node.id).inventory or {}
    assert record["bmc"]["processor_count"] == 2 and record["bmc"]["cpu_threads"] == 224
    assert Decimal(record["bmc"]["drives"][0]["capacity_bytes"]) == 480_103_981_056


def test_each_bmc_address_mistake_gets_its_own_answer(
    platform: Platform, operator: TenantCtx, tmp_path: Path,
) -> None:
    """TLS against a plain port and an address that is no Redfish service are the
    operator's to fix (422 with what to do), a port nobody listens on may be a restarting
    BMC (502, retried); nothing is recorded."""
    import functools
    import http.server
    import threading

    from gpulease.domain.errors import BadGateway, InvalidInput
    from gpulease.testing.servers import free_port

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("<html>a web server</html>")
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www")))
    threading.Thread(target=web.serve_forever, daemon=True).start()
    port = web.server_address[1]
    cases = [(f"https://127.0.0.1:{port}/redfish/v1/Systems/1", InvalidInput,
              "answers plain HTTP"),
             (f"http://127.0.0.1:{port}/redfish/v1/Systems/1", InvalidInput,
              "nothing speaks Redfish there"),
             (f"http://127.0.0.1:{free_port()}/redfish/v1/Systems/1", BadGateway,
              "refused the connection")]
    try:
        for address, error, says in cases:
            with pytest.raises(error, match=says):
                enrollment.enroll(platform, operator.principal, EnrollRequest(
                    bmc=address, username=USER, password=PASSWORD,
                    offer="h100-80g-x8@ningxia-1"))
    finally:
        web.shutdown()
    assert inventory.list_nodes(platform, operator.principal).total == 0


def test_a_huawei_like_tree_of_ascend_npus_matches_its_offer(
    platform: Platform, operator: TenantCtx, tmp_path: Path,
) -> None:
    write_huawei_like(tmp_path / "ibmc")
    bmc = serve_mockup(tmp_path / "ibmc")
    try:
        node = enrollment.enroll(platform, operator.principal, EnrollRequest(
            bmc=f"{bmc.url}/redfish/v1/Systems/1", username=USER, password=PASSWORD,
            offer="ascend910b-64g-x8@huawei-zone"))
    finally:
        bmc.stop()
    assert node.status == "available", node.status_reason
    record = inventory.get_node(platform, operator.principal, node.id).inventory or {}
    inv, comparison = record["bmc"], record["comparison"]
    assert {g["vendor"] for g in inv["gpus"]} == {"Huawei"} and len(inv["gpus"]) == 8
    assert (inv["processor_count"], inv["cpu_cores"], inv["cpu_threads"]) == (4, 384, 384)
    assert inv["nic_macs"] == ["f4:1d:6b:00:00:01", "f4:1d:6b:00:00:02"]  # no virtual NIC
    assert {"GPUs", "GPU model", "drives", "virtual media"} <= set(comparison["checked"])
    assert any("HDDPlaneDisk9 unreadable" in n for n in comparison["notes"])
