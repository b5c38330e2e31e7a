"""The deploy ramdisk for real: built from Debian's kernel and busybox, inserted as virtual
media through the lab's Redfish BMC from a loopback URL and booted once from CD by a QEMU
server, three times: an image whose checksum is wrong (nothing written), the right one
(written, read back on the server and again from the host), and the erase (the host reads
the disk files back and finds no data)."""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from pathlib import Path

import pytest

from gpulease.drivers.redfish import RedfishBmc, RedfishDriver
from gpulease.lab import lab as labs
from gpulease.lab import ramdisk
from gpulease.lab.deploy import Boot, run_ramdisk
from gpulease.lab.media import MediaServer
from gpulease.ports.bmc import BmcEndpoint, MediaSlot
from gpulease.testing.servers import free_port
from tests.fixtures.lab import allocated_data, host_read, need_libvirt

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

BOOT_BUDGET_S = 300  # TCG on a busy 2-core machine: ~15 s alone, minutes under the suite
IMAGE_BYTES = 32 * 2**20
MARKER = b"TENANT-DATA-"


@pytest.fixture
def cache() -> Path:
    """The kernel and ramdisk cache, kept across runs (built once per inputs' hash)."""
    missing = ramdisk.missing_tools()
    if missing:
        pytest.fail(f"the ramdisk needs {', '.join(missing)}; .ci/run installs them")
    folder = Path(tempfile.gettempdir()) / "gpulease-lab-cache"
    folder.mkdir(exist_ok=True)
    return folder


def boot_ramdisk(bmc: RedfishBmc, files: MediaServer, name: str) -> dict[str, str]:
    """One boot of the ramdisk from CD (the lab deploy's own step); its report, once it has
    powered the server off."""
    return run_ramdisk(Boot(name, bmc, files, files.plan), BOOT_BUDGET_S)


def test_the_ramdisk_writes_only_a_checked_image_and_erases_what_the_host_reads_back(
        cache: Path, lab_folder: Path, tmp_path: Path) -> None:
    folder = lab_folder
    need_libvirt()
    image = tmp_path / "image.raw"
    image.write_bytes((MARKER + uuid.uuid4().hex.encode() + b"\n") * (IMAGE_BYTES // 45)
                      + b"\0" * (IMAGE_BYTES % 45))
    assert image.stat().st_size == IMAGE_BYTES
    sha = hashlib.sha256(image.read_bytes()).hexdigest()
    port = free_port()
    iso = ramdisk.build(cache, f"gpulease.control=http://10.0.2.2:{port}")
    files = MediaServer({"ramdisk.iso": iso, "image.raw": image}, port)
    name = f"rd{uuid.uuid4().hex[:6]}"
    lab = labs.up(folder, labs.Plan(servers=1, bmc_port=free_port(),
                                    first_ssh_port=free_port(), name=name, accel="tcg"))
    try:
        server = lab.servers[0]
        system_disk = folder / "pool" / f"{server['name']}-system.qcow2"
        data_disk = folder / "pool" / f"{server['name']}-data.qcow2"
        bmc = RedfishDriver(timeout_s=60).bmc(BmcEndpoint(
            str(server["name"]), lab.system_url(server), lab.username, lab.password))
        bmc.insert_media(f"http://127.0.0.1:{port}/ramdisk.iso", MediaSlot.CD)
        assert bmc.inserted_media(MediaSlot.CD)
        write = (f"action=write\nimage_url=http://10.0.2.2:{port}/image.raw\n"
                 f"image_bytes={IMAGE_BYTES}\ndisk=vda\n")

        files.plan = write + "image_sha256=" + "0" * 64 + "\n"
        refused = boot_ramdisk(bmc, files, str(server["name"]))
        assert refused["ok"] == "0" and refused["why"] == "checksum", refused
        assert refused["sha256"] == sha  # what it fetched: the file, not the plan's word
        assert allocated_data(system_disk) == []  # nothing written

        files.plan = write + f"image_sha256={sha}\n"
        written = boot_ramdisk(bmc, files, str(server["name"]))
        assert {k: written[k] for k in ("step", "ok", "sha256", "disk")} == {
            "step": "write", "ok": "1", "sha256": sha, "disk": "vda"}
        assert int(written["write_cs"]) > 0 and int(written["uptime_cs"]) > 0
        assert hashlib.sha256(host_read(system_disk, IMAGE_BYTES)).hexdigest() == sha

        files.plan = "action=erase\n"
        erased = boot_ramdisk(bmc, files, str(server["name"]))
        assert erased["ok"] == "1", erased
        assert set(erased["methods"].strip(",").split(",")) == {"vda:discard", "vdb:discard"}
        assert MARKER not in host_read(system_disk, IMAGE_BYTES)
        assert allocated_data(system_disk) == [] and allocated_data(data_disk) == []
    finally:
        files.close()
        labs.down(folder)


def test_a_plan_is_data_the_ramdisk_checks_never_a_script_it_runs() -> None:
    """Each value is matched against its pattern before use; the /init sources nothing."""
    assert ". /tmp/plan" not in ramdisk.INIT and "eval" not in ramdisk.INIT
    assert "image_sha256) case \"$value\" in *[!0-9a-f]*" in ramdisk.INIT
