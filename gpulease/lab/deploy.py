"""A lab server deployed and erased by the lab itself, through its Redfish BMC, the way a
provider's deploy does it: the deploy ramdisk as virtual media (one-time CD boot) writes
the image onto the system disk (its checksum first), then the server boots from disk with
a NoCloud config drive in its CD slot (hostname, the tenant's SSH keys, a one-time root
password, the data disk at /data). The erase boots the ramdisk again to discard both
disks and read them back. The lab's media server serves the files meanwhile, on the lab's
media port (the ramdisk reaches it at 10.0.2.2, QEMU's name for the host's loopback)."""

from __future__ import annotations

import secrets
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gpulease.configdrive import ConfigDriveSpec, build_iso
from gpulease.drivers.redfish import RedfishBmc, RedfishDriver
from gpulease.lab import machines, ramdisk
from gpulease.lab.lab import GUEST_HOST, Lab
from gpulease.lab.media import MediaServer
from gpulease.ports.bmc import BmcEndpoint, BootDevice, MediaSlot


class DeployFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Order:
    """What a deploy writes and sets: the image (a raw disk image and its SHA-256), the
    server's hostname and the tenant's SSH keys."""

    image: Path
    image_sha256: str
    hostname: str
    ssh_keys: tuple[str, ...]


@dataclass
class Delivered:
    server: str
    ssh_port: int
    root_password: str  # shown once
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def ssh(self) -> str:
        return f"ssh -p {self.ssh_port} root@127.0.0.1"


def _bmc(lab: Lab, name: str) -> RedfishBmc:
    return RedfishDriver(timeout_s=120).bmc(BmcEndpoint(
        name, lab.system_url(lab.server(name)), lab.username, lab.password))


def _media(lab: Lab, name: str, cache: Path, files: dict[str, Path]
           ) -> tuple[MediaServer, str]:
    port = lab.media_port_of(name)
    iso = ramdisk.build(cache, f"gpulease.control=http://{GUEST_HOST}:{port}")
    media = MediaServer({"ramdisk.iso": iso, **files}, port)
    return media, f"http://127.0.0.1:{port}"


def _off(name: str, budget_s: float) -> None:
    deadline = time.monotonic() + budget_s
    while machines.power_state(name) != "Off":
        if time.monotonic() > deadline:
            raise DeployFailed(f"{name} did not power off within {budget_s:g} s")
        time.sleep(0.5)


@dataclass(frozen=True)
class Boot:
    """One boot of the ramdisk: the server, its BMC, the media server, the plan."""

    name: str
    bmc: RedfishBmc
    media: MediaServer
    plan: str


def run_ramdisk(boot: Boot, budget_s: float) -> dict[str, str]:
    """One boot of the ramdisk (inserted already) with its plan; its report, once the
    server is off again."""
    bmc, media, plan = boot.bmc, boot.media, boot.plan
    media.plan = plan
    bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
    bmc.power_on()
    try:
        report = media.next_report(budget_s)
    except Exception:
        raise DeployFailed(f"the ramdisk did not report within {budget_s:g} s") from None
    _off(boot.name, 120)
    return report


def deploy(lab: Lab, name: str, order: Order, cache: Path, budget_s: float = 1800
           ) -> Delivered:
    """Writes the image, boots it with its config drive; returns when the server's SSH
    answers (its banner)."""
    if machines.power_state(name) != "Off":
        raise DeployFailed(f"{name} is on: power it off (or erase it) first")
    password = secrets.token_urlsafe(12)
    seed = Path(lab.folder) / f"{name}-seed.iso"
    seed.write_bytes(build_iso(ConfigDriveSpec(
        instance_id=f"lab-{uuid.uuid4().hex[:12]}", hostname=order.hostname,
        ssh_keys=order.ssh_keys, root_password=password,
        # no control plane here: the image's agent runs (simulated GPU) without enrolling
        agent_url=f"http://{GUEST_HOST}:{lab.media_port_of(name)}", agent_token="lab",
        agent_backend="simulated", agent_gpus=1, data_disk_device="/dev/vdb",
        fabric_nic="eth1" if lab.server(name).get("fabric_mac") else None)))
    seed.chmod(0o600)
    media, base = _media(lab, name, cache, {"image.raw": order.image, "seed.iso": seed})
    done = Delivered(name, int(str(lab.server(name)["ssh_port"])), password)
    started = time.monotonic()
    try:
        bmc = _bmc(lab, name)
        bmc.insert_media(f"{base}/ramdisk.iso", MediaSlot.CD)
        report = run_ramdisk(Boot(name, bmc, media, (
            f"action=write\nimage_url=http://{GUEST_HOST}:{lab.media_port_of(name)}/image.raw\n"
            f"image_sha256={order.image_sha256}\n"
            f"image_bytes={order.image.stat().st_size}\ndisk=vda\n")), budget_s)
        if report.get("ok") != "1":
            raise DeployFailed(f"the image was not written: {report.get('why', report)}")
        done.stages["image_written_s"] = round(time.monotonic() - started, 1)
        write_s = int(report.get("write_cs", "0")) / 100  # the server's own clock
        done.stages["server_write_s"] = write_s
        if write_s:
            done.stages["server_write_mib_per_s"] = round(
                order.image.stat().st_size / 2**20 / write_s, 1)
        bmc.eject_media()
        bmc.insert_media(f"{base}/seed.iso", MediaSlot.CD)
        bmc.set_one_time_boot(BootDevice.DISK)
        bmc.power_on()
    finally:
        media.close()
        seed.unlink(missing_ok=True)  # the emulator copied it into the pool
    booted = time.monotonic()
    wait_for_ssh(done.ssh_port, budget_s)
    done.stages["first_boot_to_ssh_s"] = round(time.monotonic() - booted, 1)
    done.stages["ssh_answers_s"] = round(time.monotonic() - started, 1)
    return done


def wait_for_ssh(port: int, budget_s: float) -> None:
    """Until 127.0.0.1:port answers with an SSH banner (QEMU accepts the connection before
    the server's sshd is up, so a connect alone proves nothing)."""
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.settimeout(10)
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(3)
    raise DeployFailed(f"no SSH on 127.0.0.1:{port} within {budget_s:g} s")


def erase(lab: Lab, name: str, cache: Path, budget_s: float = 900) -> dict[str, str]:
    """Both disks discarded (or zeroed) and read back by the ramdisk; its report."""
    bmc = _bmc(lab, name)
    if machines.power_state(name) != "Off":
        bmc.power_off()
        _off(name, 120)
    media, base = _media(lab, name, cache, {})
    try:
        if bmc.inserted_media(MediaSlot.CD):
            bmc.eject_media()
        bmc.insert_media(f"{base}/ramdisk.iso", MediaSlot.CD)
        report = run_ramdisk(Boot(name, bmc, media, "action=erase\n"), budget_s)
    finally:
        media.close()
    if report.get("ok") != "1":
        raise DeployFailed(f"the erase did not finish clean: {report}")
    return report
