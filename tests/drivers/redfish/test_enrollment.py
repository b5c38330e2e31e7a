"""Enrolling servers by their BMC against sushy-emulator, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import func, select

from gpulease.cli.commands.enroll import enroll_many
from gpulease.db.tables import Fabric, Node
from gpulease.domain.catalog import DEFAULT_CATALOG, load_catalog
from gpulease.domain.errors import BadGateway, Conflict, InvalidInput
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.platform import Platform
from gpulease.schemas import EnrollRequest
from gpulease.schemas.fleet import NodeUpdate
from gpulease.services.fleet import enrollment, node_changes
from gpulease.testing.callers import TenantCtx
from gpulease.testing.redfish_trees.mockup import serve_mockup
from gpulease.testing.servers import LiveServer, free_port
from tests.fixtures.redfish import PASSWORD, USER, start_emulator

pytestmark = pytest.mark.slow
OFFER = "h100-80g-x8@ningxia-1"


@pytest.fixture
def rack(tmp_path: Path) -> Iterator[Emulator]:
    """20 BMCs; the 7th lists one NIC where the offer expects two."""
    emu = start_emulator(tmp_path / "rack", count=20, power="On",
                         nics=[1 if i == 7 else 2 for i in range(1, 21)])
    yield emu
    emu.stop()


@pytest.fixture
def checked(platform: Platform, tmp_path: Path) -> Platform:
    """The operator's catalog says an H100 server has two network ports."""
    text = DEFAULT_CATALOG.read_text().replace(
        'monthly_price = "84480"', 'monthly_price = "84480"\nnic_count = 2')
    (tmp_path / "ops.toml").write_text(text)
    platform.catalog = load_catalog(tmp_path / "ops.toml")
    with platform.db.write() as s:
        s.add(Fabric(id="ib-ningxia-1-1", region="ningxia-1", kind="infiniband", rate_gbps=400))
    return platform


def req(emu: Emulator, i: int, **kw: object) -> EnrollRequest:
    return EnrollRequest(**{"bmc": emu.system_url(i), "username": USER, "password": PASSWORD,
                            "offer": OFFER, "fabric": "ib-ningxia-1-1", **kw})


def nodes(p: Platform) -> int:
    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(Node)) or 0


def test_enroll_20_bmcs_and_a_mismatch_stays_enrolling_with_its_report(
    checked: Platform, rack: Emulator, operator: TenantCtx
) -> None:
    with ThreadPoolExecutor(8) as pool:
        views = list(pool.map(lambda i: enrollment.enroll(checked, operator.principal,
                                                          req(rack, i)), range(20)))
    by_status: dict[str, list] = {}
    for v in views:
        by_status.setdefault(v.status, []).append(v)
    assert len(by_status["available"]) == 19
    (odd,) = by_status["enrolling"]
    assert odd.name == rack.systems[6]  # no --name: named after the BMC's system id
    assert "1 NICs, offer says 2" in (odd.status_reason or "")
    assert "not reported by the BMC: GPUs, memory, drives" in (odd.status_reason or "")
    good = by_status["available"][0]
    assert good.inventory and good.inventory["comparison"]["matches"] is True
    assert good.inventory["bmc"]["manufacturer"] == "Sushy Emulator"
    assert good.bmc_driver == "redfish"
    # a real Redfish BMC, driven through the real node agent by default
    assert good.agent == "gpulease" and not good.simulated
    assert "password" not in json.dumps(good.model_dump(mode="json")).lower()
    with checked.db.read() as s:
        stored = s.scalar(select(Node.bmc_password_enc).where(Node.id == good.id))
        assert stored and PASSWORD not in stored  # sealed at rest
    # a matching server (the rack starts powered on) was told to power off: it lands
    # within the fake BMC's 1-11 s; the mismatching one was left alone
    path = f"/redfish/v1/Systems/{good.inventory['bmc']['system_id']}"
    deadline = time.monotonic() + 15
    while rack.get(path)["PowerState"] != "Off" and time.monotonic() < deadline:
        time.sleep(0.25)
    assert rack.get(path)["PowerState"] == "Off"
    assert rack.get(f"/redfish/v1/Systems/{rack.systems[6]}")["PowerState"] == "On"


def test_bmc_refusals_and_bad_input_write_nothing(
    checked: Platform, rack: Emulator, operator: TenantCtx
) -> None:
    cases = [
        (req(rack, 0, password="wrong"), InvalidInput, "refused the credentials"),
        (req(rack, 0, offer="h100-80g-x8@mars"), InvalidInput, "Unknown offer"),
        (req(rack, 0, bmc="ipmi://10.0.0.5"), InvalidInput, "not an http"),
        (req(rack, 0, bmc=f"http://127.0.0.1:{free_port()}/redfish/v1/Systems/1"), BadGateway,
         "unreachable"),
        (req(rack, 0, offer=None), InvalidInput, "Cannot tell which offer"),
        (req(rack, 0, runtime="tcp://10.0.0.9:2376"), InvalidInput,
         "Only a shared \\(container\\) server has a Docker engine URL"),
        (req(rack, 0, pool="container"), InvalidInput, "needs its Docker engine URL"),
        (req(rack, 0, fabric="ib-nowhere"), InvalidInput, "No fabric 'ib-nowhere'.*fabric create"),
        (req(rack, 0, rack="r-nowhere"), InvalidInput, "No rack 'r-nowhere'.*rack create"),
    ]
    for request, error, says in cases:
        with pytest.raises(error, match=says):
            enrollment.enroll(checked, operator.principal, request)
    assert nodes(checked) == 0
    # an unknown rack or fabric is refused before the BMC is told anything: still on
    assert rack.get(f"/redfish/v1/Systems/{rack.systems[0]}")["PowerState"] == "On"
    enrollment.enroll(checked, operator.principal, req(rack, 0))
    with pytest.raises(Conflict, match="enrolled already"):
        enrollment.enroll(checked, operator.principal, req(rack, 0))
    assert nodes(checked) == 1
    shared = enrollment.enroll(checked, operator.principal,
                               req(rack, 1, pool="container", runtime="tcp://10.0.0.9:2376"))
    assert shared.pool == "container" and shared.runtime == "tcp://10.0.0.9:2376"


def test_bulk_enrollment_from_csv_over_http(
    checked: Platform, rack: Emulator, operator: TenantCtx, server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "bmc.pw").write_text(PASSWORD + "\n")
    (tmp_path / "bad.pw").write_text("nope\n")
    lines = ["bmc,username,password_file,offer,fabric"]
    for i in range(4):
        lines.append(f"{rack.system_url(i)},{USER},{'bad.pw' if i == 3 else 'bmc.pw'},{OFFER},"
                     "ib-ningxia-1-1")
    (tmp_path / "rack.csv").write_text("\n".join(lines) + "\n")
    out = Console(record=True, width=200)
    code = enroll_many(server.client(operator.token), tmp_path / "rack.csv", 4, False, out,
                       Console(stderr=True))
    text = out.export_text()
    assert code == 1  # one row failed
    assert text.count("available") == 3 and "refused the credentials" in text
    assert nodes(checked) == 3


def test_a_bmc_that_reports_nothing_checkable_is_refused_and_no_serial_is_invented(
    checked: Platform, rack: Emulator, operator: TenantCtx, tmp_path: Path
) -> None:
    root = tmp_path / "bare"
    system = "/redfish/v1/Systems/1"
    docs = {"/redfish/v1": {"Id": "RootService", "Name": "Root", "RedfishVersion": "1.6.0",
                            "Systems": {"@odata.id": "/redfish/v1/Systems"}},
            "/redfish/v1/Systems": {"Name": "Systems", "Members@odata.count": 1,
                                    "Members": [{"@odata.id": system}]},
            system: {"@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem", "Id": "1",
                     "Name": "server", "PowerState": "On"}}
    for path, doc in docs.items():
        target = root / path.removeprefix("/redfish/v1").lstrip("/") / "index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"@odata.id": path, **doc}))
    bare = serve_mockup(root)
    try:
        with pytest.raises(InvalidInput, match="reports no memory, GPUs, drives or NICs"):
            enrollment.enroll(checked, operator.principal, EnrollRequest(
                bmc=bare.system_url, username=USER, password=PASSWORD, offer=OFFER))
    finally:
        bare.stop()
    assert nodes(checked) == 0
    # the emulator's systems have no serial: the node says so instead of making one up
    view = enrollment.enroll(checked, operator.principal, req(rack, 2))
    assert view.serial == ""


def test_bmc_credentials_are_tried_before_they_are_stored(
    checked: Platform, rack: Emulator, operator: TenantCtx
) -> None:
    node = enrollment.enroll(checked, operator.principal, req(rack, 3))
    with pytest.raises(InvalidInput, match="refused the new credentials"):
        node_changes.update_node(checked, operator.principal, node.id,
                                 NodeUpdate(bmc_username=USER, bmc_password="wrong"))
    with checked.db.read() as s:
        sealed = s.scalar(select(Node.bmc_password_enc).where(Node.id == node.id))
    assert sealed and checked.box.open(sealed) == PASSWORD  # nothing changed
    node_changes.update_node(checked, operator.principal, node.id,
                             NodeUpdate(bmc_username=USER, bmc_password=PASSWORD))
    untried = node_changes.update_node(checked, operator.principal, node.id, NodeUpdate(
        bmc_password="set-on-the-bmc-later", verify=False))
    assert untried.status == "available"
    with checked.db.read() as s:
        sealed = s.scalar(select(Node.bmc_password_enc).where(Node.id == node.id))
    assert sealed and checked.box.open(sealed) == "set-on-the-bmc-later"


def test_an_operator_enrolls_a_server_from_the_console(checked: Platform, rack: Emulator
                                                       ) -> None:
    from fastapi.testclient import TestClient

    from gpulease.api.app import create_app
    from tests.web.console import operator_in

    with TestClient(create_app(checked)) as client:
        operator_in(checked, client)
        form = client.get("/console/nodes/enroll")
        assert form.status_code == 200 and 'for="bmc"' in form.text
        wrong = client.post("/console/nodes/enroll", data={
            "bmc": rack.system_url(1), "username": USER, "password": "not it",
            "offer": OFFER, "fabric": "ib-ningxia-1-1"})
        assert wrong.status_code in (401, 422, 502) and 'id="enroll-form"' in wrong.text
        assert nodes(checked) == 0  # a refused BMC writes nothing
        done = client.post("/console/nodes/enroll", data={
            "bmc": rack.system_url(1), "username": USER, "password": PASSWORD,
            "offer": OFFER, "fabric": "ib-ningxia-1-1", "name": "rack-a-01"},
            follow_redirects=False)
        assert done.status_code == 303 and "/console/nodes/" in done.headers["location"]
        page = client.get(done.headers["location"]).text
        assert "rack-a-01" in page and 'id="comparison"' in page
        mismatch = client.post("/console/nodes/enroll", data={
            "bmc": rack.system_url(6), "username": USER, "password": PASSWORD,
            "offer": OFFER, "fabric": "ib-ningxia-1-1"}, follow_redirects=True)
        found = re.search(r'<h1>.*?</h1>', mismatch.text, re.S)
        assert found and "status-enrolling" in found.group(0), found
        assert "differs from" in mismatch.text
