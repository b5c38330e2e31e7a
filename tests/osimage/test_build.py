"""The image for real: built from Debian's packages (the node agent in it), written onto a
lab server's system disk by the deploy ramdisk (through the lab's Redfish BMC), booted from
that disk with a NoCloud config drive in the CD slot, and logged into over SSH with the
tenant's key: the hostname set, /data mounted from the data disk, the root password the one
hashed into the drive, host keys of its own. Then erased: the host reads both disk files
back and finds no data."""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from pathlib import Path

import bcrypt
import pytest

from gpulease.lab import deploy as deploys
from gpulease.lab import lab as labs
from gpulease.lab import ramdisk
from gpulease.osimage import build as images
from gpulease.testing.servers import free_port
from tests.fixtures.lab import IMAGE_CACHE, allocated_data, need_libvirt, ssh_in, tenant_key

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

CACHE = IMAGE_CACHE
DEPLOY_BUDGET_S = 1200  # TCG: the write, then BIOS, the kernel, systemd and cloud-init


@pytest.fixture(scope="module")
def built() -> images.Built:
    need_libvirt()
    missing = images.missing_tools() + ramdisk.missing_tools()
    if missing:
        pytest.fail(f"the image build needs {', '.join(missing)}; .ci/run installs them")
    return images.build(CACHE)


def test_the_image_is_a_bootable_disk_with_its_recorded_size_and_checksum(
        built: images.Built) -> None:
    image = Path(built.path)
    assert image.stat().st_size == built.size_bytes
    with image.open("rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == built.sha256
    table = json.loads(subprocess.run(["sfdisk", "--json", str(image)], capture_output=True,
                                      text=True, check=True).stdout)["partitiontable"]
    boot, root = table["partitions"]
    assert table["label"] == "dos" and boot["type"] == "c" and boot.get("bootable")
    assert root["type"] == "83"
    assert images.build(CACHE).from_cache  # the same inputs: not built again



def test_the_lab_deploy_lets_the_tenant_in_and_its_erase_leaves_nothing(
        built: images.Built, lab_folder: Path, tmp_path: Path) -> None:
    """The lab's own deploy (`gpulease lab deploy`, no platform): SSH with the tenant's key,
    the hostname, /data, the root password, host keys of its own, the root grown; then its
    erase leaves no data in either disk file. (Through the platform, and the fabric of a
    cluster: tests/lab/test_order.py.)"""
    folder = lab_folder
    key = tenant_key(tmp_path)
    name = f"os{uuid.uuid4().hex[:6]}"
    lab = labs.up(folder, labs.Plan(servers=1, bmc_port=free_port(), first_ssh_port=free_port(),
                                    media_port=free_port(), name=name, accel="tcg"))
    try:
        (first,) = (str(s["name"]) for s in lab.servers)
        done = deploys.deploy(lab, first, deploys.Order(
            Path(built.path), built.sha256, f"tenant-{first}",
            (key.with_suffix(".pub").read_text().strip(),)),
            Path(lab.folder) / "cache", DEPLOY_BUDGET_S)
        assert done.ssh == f"ssh -p {lab.servers[0]['ssh_port']} root@127.0.0.1"
        facts = ssh_in(key, done.ssh_port,
                     "cloud-init status --wait >/dev/null; hostname; "
                     "findmnt -n -o SOURCE /data; getent shadow root | cut -d: -f2; "
                     "ls /etc/ssh/ssh_host_ed25519_key.pub; "
                     "df -B1 --output=size / | tail -1; "
                     "echo TENANT-SECRET > /data/secret; sync")
        hostname, data, root_hash, host_key, root_bytes = facts.split()
        assert hostname == f"tenant-{first}"
        assert data == "/dev/vdb1"
        assert bcrypt.checkpw(done.root_password.encode(), root_hash.encode())
        assert host_key == "/etc/ssh/ssh_host_ed25519_key.pub"
        assert int(root_bytes) > 8 * 10**9  # grown from the image's to the 10 GB disk

        report = deploys.erase(lab, first, Path(lab.folder) / "cache")
        assert set(report["methods"].strip(",").split(",")) == {"vda:discard", "vdb:discard"}
        pool_dir = folder / "pool"
        for disk in (pool_dir / f"{first}-system.qcow2", pool_dir / f"{first}-data.qcow2"):
            assert allocated_data(disk) == [], disk.name  # nothing the tenant left
    finally:
        labs.down(folder)
