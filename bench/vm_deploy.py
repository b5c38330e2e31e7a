"""A lab deploy and release, timed stage by stage, printed as JSON.

One QEMU server behind the lab's Redfish BMC (sushy-tools' libvirt driver): `lab up` (with
the accelerator probe); the deploy (`gpulease lab deploy`'s code): the ramdisk as virtual
media writes the image (checksum pass, write, read-back hash), then the server boots it
from disk with its config drive until its SSH answers; the erase (the ramdisk discards both
disks and reads them back); `lab down`. The server's own time (what the ramdisk measured on
its clock: the image write, the erase) is split from the wall time around it (BIOS, GRUB,
the kernel, the BMC and libvirt, the first boot). Baseline from the same run: the ramdisk
booted by a bare QEMU process with the same devices and plan `none`, no libvirt and no BMC.
Needs libvirtd and a built image (`gpulease image build`; docs/operations.md, "The lab").
`python bench/vm_deploy.py [IMAGE.raw, default: the newest built]`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpulease.lab import deploy as deploys
from gpulease.lab import lab as labs
from gpulease.lab import ramdisk
from gpulease.lab.accel import QEMU
from gpulease.lab.media import MediaServer
from gpulease.osimage.build import Built, latest
from gpulease.testing.servers import free_port

BUDGET_S = 1800
IMAGES = Path("/var/tmp/gpulease-images")


def bare_qemu_s(cache: Path, accel: str) -> float:
    """The ramdisk booted by QEMU alone (plan `none`) to its report: the VM's own time."""
    port = free_port()
    iso = ramdisk.build(cache, f"gpulease.control=http://10.0.2.2:{port}")
    media = MediaServer({}, port)
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
            media.next_report(BUDGET_S)
            return round(time.monotonic() - started, 2)
        finally:
            proc.wait(BUDGET_S)
            media.close()


def run(image: Built) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="gpulease-bench-lab-", dir="/var/tmp"))
    work.chmod(0o711)
    stages: dict[str, object] = {}
    key = work / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    try:
        t = time.monotonic()
        lab = labs.up(work / "lab", labs.Plan(
            servers=1, bmc_port=free_port(), first_ssh_port=free_port(),
            media_port=free_port(), name=f"bench{uuid.uuid4().hex[:6]}"))
        stages["lab_up_s (kernel fetch and accelerator probe included)"] = round(
            time.monotonic() - t, 2)
        cache = work / "lab" / "cache"
        t = time.monotonic()
        ramdisk.build(cache, f"gpulease.control=http://10.0.2.2:{lab.media_port}")
        stages["ramdisk_build_s"] = round(time.monotonic() - t, 2)
        server = str(lab.servers[0]["name"])
        done = deploys.deploy(lab, server, deploys.Order(
            Path(image.path), image.sha256, "bench-1",
            (key.with_suffix(".pub").read_text().strip(),)), cache, BUDGET_S)
        stages["deploy"] = done.stages
        t = time.monotonic()
        erased = deploys.erase(lab, server, cache, BUDGET_S)
        stages["erase"] = {"wall_s": round(time.monotonic() - t, 2),
                           "server_erase_s": int(erased["erase_cs"]) / 100,
                           "methods": erased["methods"].strip(",")}
        t = time.monotonic()
        labs.down(work / "lab")
        stages["lab_down_s"] = round(time.monotonic() - t, 2)
        return {"bench": "vm_deploy", "accelerator": lab.accel, "why": lab.accel_why,
                "image": Path(image.path).name,
                "image_mib": round(image.size_bytes / 2**20, 1),
                "stages": stages,
                "baseline_bare_qemu_ramdisk_boot_to_report_s": bare_qemu_s(cache, lab.accel)}
    finally:
        labs.down(work / "lab")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    chosen = latest(IMAGES)
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        chosen = Built(**{**json.loads(path.with_suffix(".json").read_text()),
                          "from_cache": True})
    if chosen is None:
        sys.exit("no image: run `gpulease image build` first")
    print(json.dumps(run(chosen), indent=2))
