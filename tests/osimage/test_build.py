"""The image for real: built from Debian's packages, written onto a lab server's system disk
by the deploy ramdisk (through the lab's Redfish BMC), booted from that disk with a NoCloud
config drive in the CD slot, and logged into over SSH with the tenant's key: the hostname
set, /data mounted from the data disk, the root password the one hashed into the drive, host
keys of its own."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from gpulease.configdrive import ConfigDriveSpec, build_iso
from gpulease.drivers.redfish import RedfishBmc, RedfishDriver
from gpulease.lab import lab as labs
from gpulease.lab import machines, ramdisk
from gpulease.osimage import build as images
from gpulease.ports.bmc import BmcEndpoint, BootDevice, MediaSlot
from gpulease.testing.servers import MediaServer, free_port
from tests.fixtures.lab import need_libvirt

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

CACHE = Path("/var/tmp/gpulease-images")  # built once per inputs' hash, kept across runs
WRITE_BUDGET_S = 900
SSH_BUDGET_S = 900  # TCG: BIOS, the kernel, systemd and cloud-init's first boot


@pytest.fixture(scope="module")
def built() -> images.Built:
    need_libvirt()
    missing = images.missing_tools() + ramdisk.missing_tools()
    if missing:
        pytest.fail(f"the image build needs {', '.join(missing)}; .ci/run installs them")
    return images.build(CACHE)


@pytest.fixture
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="gpulease-lab-test-", dir="/var/tmp"))
    made.chmod(0o711)
    yield made / "lab"
    shutil.rmtree(made, ignore_errors=True)


def test_the_image_is_a_bootable_disk_with_its_recorded_size_and_checksum(
        built: images.Built) -> None:
    image = Path(built.path)
    assert image.stat().st_size == built.size_bytes
    digest = hashlib.sha256()
    with image.open("rb") as f:
        while chunk := f.read(8 * 2**20):
            digest.update(chunk)
    assert digest.hexdigest() == built.sha256
    table = json.loads(subprocess.run(["sfdisk", "--json", str(image)], capture_output=True,
                                      text=True, check=True).stdout)["partitiontable"]
    boot, root = table["partitions"]
    assert table["label"] == "dos" and boot["type"] == "c" and boot.get("bootable")
    assert root["type"] == "83"
    assert images.build(CACHE).from_cache  # the same inputs: not built again


def _ssh(key: Path, port: int, command: str, timeout_s: float = 30) -> str:
    done = subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "root@127.0.0.1", command],
        capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise ConnectionError(done.stderr.strip() or f"exit {done.returncode}")
    return done.stdout


def _power_off(bmc: RedfishBmc, name: str) -> None:
    deadline = time.monotonic() + 120
    while machines.power_state(name) != "Off":
        assert time.monotonic() < deadline, f"{name} did not power off"
        time.sleep(0.5)


def test_a_server_deployed_with_the_image_lets_the_tenant_in_over_ssh(
        built: images.Built, folder: Path, tmp_path: Path) -> None:
    key = tmp_path / "tenant"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True)
    password = "once-" + uuid.uuid4().hex[:12]
    seed = tmp_path / "seed.iso"
    seed.write_bytes(build_iso(ConfigDriveSpec(
        instance_id=f"i-{uuid.uuid4().hex[:8]}", hostname="lab-tenant-1",
        ssh_keys=(key.with_suffix(".pub").read_text().strip(),), root_password=password,
        agent_url="http://10.0.2.2:9", agent_token="unused", data_disk_device="/dev/vdb")))
    port = free_port()
    iso = ramdisk.build(Path(tempfile.gettempdir()) / "gpulease-lab-cache",
                        f"gpulease.control=http://10.0.2.2:{port}")
    files = MediaServer({"ramdisk.iso": iso, "image.raw": Path(built.path),
                         "seed.iso": seed}, port)
    name = f"os{uuid.uuid4().hex[:6]}"
    lab = labs.up(folder, labs.Plan(servers=1, bmc_port=free_port(),
                                    first_ssh_port=free_port(), name=name, accel="tcg"))
    try:
        server = lab.servers[0]
        bmc = RedfishDriver(timeout_s=120).bmc(BmcEndpoint(
            name, lab.system_url(server), lab.username, lab.password))
        bmc.insert_media(f"http://127.0.0.1:{port}/ramdisk.iso", MediaSlot.CD)
        files.plan = (f"action=write\nimage_url=http://10.0.2.2:{port}/image.raw\n"
                      f"image_sha256={built.sha256}\nimage_bytes={built.size_bytes}\n"
                      "disk=vda\n")
        bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
        bmc.power_on()
        written = files.next_report(WRITE_BUDGET_S)
        assert written["ok"] == "1", written
        _power_off(bmc, str(server["name"]))

        bmc.eject_media()
        bmc.insert_media(f"http://127.0.0.1:{port}/seed.iso", MediaSlot.CD)
        bmc.set_one_time_boot(BootDevice.DISK)
        bmc.power_on()
        deadline, last = time.monotonic() + SSH_BUDGET_S, ""
        while True:
            try:
                facts = _ssh(key, int(server["ssh_port"]),
                             "cloud-init status --wait >/dev/null; hostname; "
                             "findmnt -n -o SOURCE /data; getent shadow root | cut -d: -f2; "
                             "ls /etc/ssh/ssh_host_ed25519_key.pub", timeout_s=600)
                break
            except (ConnectionError, subprocess.TimeoutExpired) as exc:
                last = str(exc)
                assert time.monotonic() < deadline, f"no SSH login in time: {last}"
                time.sleep(5)
        hostname, data, root_hash, host_key = facts.split()
        assert hostname == "lab-tenant-1"
        assert data == "/dev/vdb1"
        assert bcrypt.checkpw(password.encode(), root_hash.encode())
        assert host_key == "/etc/ssh/ssh_host_ed25519_key.pub"
        bmc.power_off()
    finally:
        files.close()
        labs.down(folder)
