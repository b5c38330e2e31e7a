"""An image-based deploy (an offer with deploy = "image") on a simulated server, the
ramdisk's side played by the test over the control plane's loopback API as the lab's
busybox ramdisk plays it: the deploy ramdisk is mounted, its plan names the built image, its
checksum and the system disk; its report moves the deploy on; the server boots from disk
with its config drive in the CD slot. A wrong checksum fails the deploy with the reason,
and the clean's erase report becomes one certificate per disk. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gpulease.db.tables import EraseCertificate, Instance, Node, RamdiskBoot
from gpulease.domain.catalog import Site, catalog_from_text, read_catalog_text
from gpulease.lab import lab as labs
from gpulease.platform import Platform
from gpulease.ports.bmc import MediaSlot
from gpulease.schemas import OrderRequest
from gpulease.services.agents.node_agent import node_ref
from gpulease.services.fleet import ramdisk_boots
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.orders import ordering
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

IMAGE = b"a raw disk image " * 4096


@pytest.fixture
def image_node(fleet: Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[str]:
    """The lab's offer on sale with one simulated server; a built image in the store; the
    ramdisk's ISO a stand-in file (lab/ramdisk.py builds the real one, tests/lab)."""
    fleet.catalog = catalog_from_text(labs.catalog_text(read_catalog_text(None)), "lab")
    store = tmp_path / "images"
    store.mkdir()
    raw = store / "debian12-lab-0123.raw"
    raw.write_bytes(IMAGE)
    (store / "debian12-lab-0123.json").write_text(json.dumps({
        "image_id": "debian12-lab", "path": str(raw), "size_bytes": len(IMAGE),
        "sha256": hashlib.sha256(IMAGE).hexdigest(), "recipe": "0123"}))
    fleet.settings.image_store = store

    def iso(cache: Path, args: str = "") -> Path:
        cache.mkdir(parents=True, exist_ok=True)
        made = cache / f"ramdisk-{hashlib.sha256(args.encode()).hexdigest()[:16]}.iso"
        made.write_text(args)  # the kernel command line the real ISO would carry
        return made

    monkeypatch.setattr(ramdisk_boots.ramdisk, "build", iso)
    with fleet.db.write() as s:
        add_node(s, fleet, NodeSpec(name="lab-sim-01", sku="lab-vm-x1", region="lab"))
    yield "lab-sim-01"


def _until_stage(worker: Worker, p: Platform, name: str, stage: str) -> None:
    deadline = time.monotonic() + 30
    while (node := node_by_name(p, name)).stage != stage:  # bounded: 30 s
        assert time.monotonic() < deadline, (node.stage, node.last_error)
        worker.step()
        time.sleep(0.01)


def _boot(p: Platform, name: str, action: str) -> RamdiskBoot:
    with p.db.read() as s:
        node = node_by_name(p, name)
        boot = ramdisk_boots.current_boot(s, node.id, action)
        assert boot is not None
        s.expunge(boot)
        return boot


def _bmc_media(p: Platform, name: str, slot: MediaSlot = MediaSlot.CD) -> str | None:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        ref = node_ref(p, node)
    return p.drivers.bmc_for(ref.bmc_driver, ref.endpoint).inserted_media(slot)


def _power_off(p: Platform, name: str) -> None:  # the ramdisk's last act
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        ref = node_ref(p, node)
    p.drivers.bmc_for(ref.bmc_driver, ref.endpoint).power_off()


def _order(p: Platform, tenant: TenantCtx, key: str) -> str:
    return ordering.place_order(p, tenant.principal, OrderRequest(
        sku="lab-vm-x1", region="lab", ssh_keys=[key]))[0].id


def test_the_ramdisk_writes_the_image_then_the_server_boots_its_disk(
        fleet: Platform, image_node: str, tenant: TenantCtx, key: str,
        server: LiveServer) -> None:
    fleet.settings.public_url = server.url
    fleet.settings.guest_url = "http://127.0.0.2:8000"  # where the servers call (not the BMC's)
    worker = Worker(fleet)
    iid = _order(fleet, tenant, key)
    _until_stage(worker, fleet, image_node, "write_image")

    boot = _boot(fleet, image_node, "write")
    assert _bmc_media(fleet, image_node) == f"{server.url}/media/ramdisk/{boot.id}.iso"
    iso = httpx.get(f"{server.url}/media/ramdisk/{boot.id}.iso")
    assert iso.status_code == 200  # its command line: where the ramdisk asks
    assert iso.text == f"gpulease.control=http://127.0.0.2:8000/media/ramdisk/{boot.id}"
    plan = httpx.get(f"{server.url}/media/ramdisk/{boot.id}/plan?disks=vdb,vda,")
    assert plan.status_code == 200
    assert plan.text.splitlines() == [
        "action=write", "image_url=http://127.0.0.2:8000/media/images/debian12-lab.raw",
        f"image_sha256={hashlib.sha256(IMAGE).hexdigest()}", f"image_bytes={len(IMAGE)}",
        "disk=vda"]
    got = httpx.get(f"{server.url}/media/images/debian12-lab.raw")
    assert got.status_code == 200 and got.content == IMAGE  # what the ramdisk streams
    worker.step()
    assert node_by_name(fleet, image_node).stage == "write_image"  # nothing until it reports

    sha = hashlib.sha256(IMAGE).hexdigest()
    reported = httpx.get(f"{server.url}/media/ramdisk/{boot.id}/report?step=write&ok=1&"
                         f"sha256={sha}&readback={len(IMAGE)}&disk=vda&write_cs=1234")
    assert reported.status_code == 200
    again = httpx.get(f"{server.url}/media/ramdisk/{boot.id}/report?step=write&ok=1")
    assert again.status_code == 409  # once
    _until_stage(worker, fleet, image_node, "boot_disk")
    worker.step()
    assert node_by_name(fleet, image_node).stage == "boot_disk"  # the ramdisk is still on
    _power_off(fleet, image_node)
    _until_stage(worker, fleet, image_node, "wait_agent")
    drive = _bmc_media(fleet, image_node)
    assert drive is not None and "/media/config/" in drive  # the config drive, in the CD slot

    worker.run_until_idle(timeout_s=60)
    with fleet.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.status == "ready", inst.status_reason if inst else ""
        assert s.scalar(select(RamdiskBoot.id)) is None  # spent: rows gone
    assert not Path(boot.iso_path).exists()  # and the ISO


def test_a_wrong_checksum_fails_the_deploy_and_the_erase_is_certified(
        fleet: Platform, image_node: str, tenant: TenantCtx, key: str,
        server: LiveServer) -> None:
    fleet.settings.public_url = server.url
    worker = Worker(fleet)
    iid = _order(fleet, tenant, key)
    _until_stage(worker, fleet, image_node, "write_image")
    boot = _boot(fleet, image_node, "write")
    httpx.get(f"{server.url}/media/ramdisk/{boot.id}/report?step=write&ok=0&why=checksum"
              f"&sha256={'0' * 64}").raise_for_status()
    _until_stage(worker, fleet, image_node, "clean_power_on")
    with fleet.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None and inst.status == "failed"
        assert "SHA-256 did not match" in (inst.status_reason or ""), inst.status_reason
        assert "nothing was written" in (inst.status_reason or "")

    erase = _boot(fleet, image_node, "erase")
    assert httpx.get(f"{server.url}/media/ramdisk/{erase.id}/plan?disks=vda,vdb").text == (
        "action=erase\n")
    _until_stage(worker, fleet, image_node, "clean_wait_agent")
    httpx.get(f"{server.url}/media/ramdisk/{erase.id}/report?step=erase&ok=1&"
              "methods=vda:discard,vdb:discard,&results=vda:discard:1:10240,"
              "vdb:discard:1:10240,&samples=33&erase_cs=1520").raise_for_status()
    _power_off(fleet, image_node)
    worker.run_until_idle(timeout_s=60)
    assert node_by_name(fleet, image_node).status == "available"
    with fleet.db.read() as s:
        certificates = list(s.scalars(select(EraseCertificate).where(
            EraseCertificate.instance_id == iid).order_by(EraseCertificate.device)))
    assert [(c.device, c.method, c.passed, c.simulated) for c in certificates] == [
        ("/dev/vda", "blkdiscard", True, False), ("/dev/vdb", "blkdiscard", True, False)]
    body = json.loads(certificates[0].certificate_json)
    assert body["size_bytes"] == 10240 * 2**20 and body["verification"]["samples"] == 33
    took = datetime.fromisoformat(body["ended_at"]) - datetime.fromisoformat(body["started_at"])
    assert took.total_seconds() == 15.2  # the ramdisk's own clock: erase_cs=1520


def test_the_ramdisk_endpoints_refuse_what_is_not_theirs(
        fleet: Platform, image_node: str, tenant: TenantCtx, key: str,
        server: LiveServer) -> None:
    fleet.settings.public_url = server.url
    worker = Worker(fleet)
    _order(fleet, tenant, key)
    _until_stage(worker, fleet, image_node, "write_image")
    boot = _boot(fleet, image_node, "write")
    base = f"{server.url}/media/ramdisk"
    assert httpx.get(f"{base}/{'x' * 43}/plan?disks=vda").status_code == 404
    assert httpx.get(f"{base}/{boot.id}/plan?disks=vda;reboot").status_code == 422
    bad = httpx.get(f"{base}/{boot.id}/report?step=write&ok=1&shell=rm")
    assert bad.status_code == 422 and "shell" in bad.json()["detail"]
    assert httpx.get(f"{base}/{boot.id}/report?step=write&ok=maybe").status_code == 422
    assert httpx.get(f"{server.url}/media/images/nothing-here.raw").status_code == 404
    fleet.settings.boot_networks = ["192.0.2.0/24"]  # loopback is no longer on it
    assert httpx.get(f"{base}/{boot.id}/plan?disks=vda").status_code == 403
    assert httpx.get(f"{server.url}/media/images/debian12-lab.raw").status_code == 403
    assert _boot(fleet, image_node, "write").report_json is None  # nothing was recorded


def test_a_site_with_an_image_cache_gives_its_servers_the_image_from_it(
        fleet: Platform, image_node: str, tenant: TenantCtx, key: str,
        server: LiveServer) -> None:
    """The lab's site names a cache near its servers: the plan points there, with the
    store's SHA-256 and size (the ramdisk checks them as ever)."""
    fleet.settings.public_url = server.url
    fleet.settings.guest_url = "http://127.0.0.2:8000"
    cache = "http://127.0.0.3:8080/images"
    fleet.catalog = fleet.catalog.replaced(sites=(
        *fleet.catalog.sites, Site(id="lab", name_zh="实验室", name_en="Lab",
                                   image_cache_url=cache)))
    worker = Worker(fleet)
    _order(fleet, tenant, key)
    _until_stage(worker, fleet, image_node, "write_image")
    boot = _boot(fleet, image_node, "write")
    plan = httpx.get(f"{server.url}/media/ramdisk/{boot.id}/plan?disks=vda")
    assert plan.status_code == 200
    assert plan.text.splitlines()[1:3] == [
        f"image_url={cache}/debian12-lab.raw", f"image_sha256={hashlib.sha256(IMAGE).hexdigest()}"]
