"""The lab's deploy path as far as it goes today, timed stage by stage, printed as JSON.

Through the lab's Redfish BMC (sushy-tools' libvirt driver) on one QEMU server: the deploy
ramdisk built (Debian's kernel cached) and found again in the cache; `lab up` (with the
accelerator probe); virtual media inserted from a loopback URL; a boot that writes an
image onto the system disk (checksum first, then the write, then a read-back hash) and a
boot that erases both disks; `lab down`. Each boot is split into the server's own time
(what the ramdisk measured from /proc/uptime: the write, the erase, the kernel's time to
its report) and the rest (BIOS, GRUB, the BMC and libvirt). Baseline from the same run: the
same ISO booted by a bare QEMU process with the same devices and plan `none`, no libvirt
and no BMC. Needs libvirtd (docs/operations.md, "The lab"). `python bench/vm_deploy.py
[IMAGE.raw | MiB of random data, default 256]` (`gpulease image build` makes an image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpulease.drivers.redfish import RedfishBmc, RedfishDriver
from gpulease.lab import lab as labs
from gpulease.lab import machines, ramdisk
from gpulease.lab.accel import QEMU
from gpulease.ports.bmc import BmcEndpoint, BootDevice, MediaSlot
from gpulease.testing.servers import MediaServer, free_port

BUDGET_S = 900


def boot(bmc: RedfishBmc, files: MediaServer, name: str) -> dict[str, float | str]:
    started = time.monotonic()
    bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
    bmc.power_on()
    powered = time.monotonic()
    report = files.next_report(BUDGET_S)
    heard = time.monotonic()
    while machines.power_state(name) != "Off":
        time.sleep(0.2)
    return {**report, "boot_and_power_on_calls_s": round(powered - started, 2),
            "power_on_to_report_s": round(heard - powered, 2),
            "report_to_off_s": round(time.monotonic() - heard, 2)}


def bare_qemu_s(iso: Path, accel: str, files: MediaServer) -> float:
    """The ISO booted by QEMU alone (plan `none`) to its report: the VM's own time."""
    files.plan = "action=none\n"
    with tempfile.TemporaryDirectory(prefix="gpulease-bench-") as tmp:
        disks = [Path(tmp) / f"{n}.qcow2" for n in ("system", "data")]
        for d in disks:
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(d), "10G"],
                           check=True)
        started = time.monotonic()
        proc = subprocess.Popen(
            [QEMU, "-accel", accel, "-machine", "pc", "-m", "1024", "-nodefaults",
             "-display", "none", "-no-reboot", "-cdrom", str(iso), "-boot", "d",
             *[a for d in disks for a in ("-drive", f"file={d},if=virtio")],
             "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            files.next_report(BUDGET_S)
            return round(time.monotonic() - started, 2)
        finally:
            proc.wait(BUDGET_S)


def run(source: str) -> dict[str, object]:
    cache = Path(tempfile.gettempdir()) / "gpulease-lab-cache"
    cache.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpulease-bench-lab-", dir="/var/tmp"))
    work.chmod(0o711)
    if source.isdigit():
        image = work / "image.raw"
        with image.open("wb") as f:
            for _ in range(int(source)):
                f.write(os.urandom(2**20))
    else:
        image = Path(source)
    size = image.stat().st_size
    image_mib = round(size / 2**20, 1)
    digest = hashlib.sha256()
    with image.open("rb") as f:
        while chunk := f.read(8 * 2**20):
            digest.update(chunk)
    sha = digest.hexdigest()
    port = free_port()
    args = f"gpulease.control=http://10.0.2.2:{port}"
    stages: dict[str, object] = {}
    try:
        for old in cache.glob("ramdisk-*.iso"):
            old.unlink()
        t = time.monotonic()
        iso = ramdisk.build(cache, args)
        stages["ramdisk_build_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        ramdisk.build(cache, args)
        stages["ramdisk_from_cache_s"] = round(time.monotonic() - t, 3)
        files = MediaServer({"ramdisk.iso": iso, "image.raw": image}, port)
        t = time.monotonic()
        lab = labs.up(work / "lab", labs.Plan(
            servers=1, bmc_port=free_port(), first_ssh_port=free_port(),
            name=f"bench{uuid.uuid4().hex[:6]}"))
        stages["lab_up_s"] = round(time.monotonic() - t, 2)
        server = lab.servers[0]
        name = str(server["name"])
        bmc = RedfishDriver(timeout_s=120).bmc(BmcEndpoint(
            name, lab.system_url(server), lab.username, lab.password))
        t = time.monotonic()
        bmc.insert_media(f"http://127.0.0.1:{port}/ramdisk.iso", MediaSlot.CD)
        stages["insert_media_s"] = round(time.monotonic() - t, 2)
        files.plan = (f"action=write\nimage_url=http://10.0.2.2:{port}/image.raw\n"
                      f"image_sha256={sha}\nimage_bytes={size}\ndisk=vda\n")
        written = boot(bmc, files, name)
        assert written["ok"] == "1", written
        write_s = int(written["write_cs"]) / 100
        stages["write_boot"] = {**written, "write_s (the VM's)": write_s,
                                "write_mib_per_s": round(image_mib / write_s, 1)}
        files.plan = "action=erase\n"
        erased = boot(bmc, files, name)
        assert erased["ok"] == "1", erased
        stages["erase_boot"] = {**erased, "erase_s (the VM's)": int(erased["erase_cs"]) / 100}
        t = time.monotonic()
        labs.down(work / "lab")
        stages["lab_down_s"] = round(time.monotonic() - t, 2)
        baseline = bare_qemu_s(iso, lab.accel, files)
        files.close()
        return {"bench": "vm_deploy", "accelerator": lab.accel, "why": lab.accel_why,
                "image": image.name, "image_mib": image_mib,
                "ramdisk_iso_bytes": iso.stat().st_size, "stages": stages,
                "baseline_bare_qemu_boot_to_report_s": baseline,
                "not_yet": "a real OS image, first boot, SSH (issue 44's next slices)"}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "256"), indent=2))
