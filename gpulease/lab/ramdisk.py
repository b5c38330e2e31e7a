"""The lab's deploy ramdisk: a bootable ISO (GRUB for BIOS and the serial console, by
`grub-mkrescue`) holding the lab's kernel and an initramfs of Debian's static busybox, the
virtio modules and an /init that brings the NIC up by DHCP and reports to the control plane
at the URL on its kernel command line (under QEMU's user-mode networking the host's
loopback is 10.0.2.2). Built once per inputs: the ISO is named by their hash."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpulease.lab.kernel import lab_kernel, lab_modules

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (.ci/run installs it)
TOOLS = ("grub-mkrescue", "xorriso", "cpio")

# What the ramdisk does, in busybox's sh. `gpulease.report=<url>` on the command line: it
# GETs <url>?disks=<block devices> once its NIC is up, then powers the server off.
INIT = """#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "gpulease-ramdisk: up"
while read -r ko; do insmod "/modules/$ko"; done < /modules/order
ip link set lo up
for nic in /sys/class/net/*; do
  nic=${nic##*/}
  [ "$nic" = lo ] && continue
  ip link set "$nic" up
  udhcpc -i "$nic" -s /udhcpc.sh -q -n -t 10
done
report=$(sed -n 's/.*gpulease\\.report=\\([^ ]*\\).*/\\1/p' /proc/cmdline)
disks=$(ls /sys/block | grep -v '^loop' | tr '\\n' , )
echo "gpulease-ramdisk: disks $disks"
if [ -n "$report" ] && wget -q -O /tmp/answer "$report?disks=$disks"; then
  echo "gpulease-ramdisk: reported"
fi
sync
poweroff -f
"""

UDHCPC = """#!/bin/sh
case "$1" in
  bound|renew)
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$router" ] && ip route add default via "${router%% *}" dev "$interface"
    ;;
esac
exit 0
"""

GRUB_CFG = """serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
menuentry "gpulease deploy ramdisk" {{
  linux /vmlinuz console=ttyS0,115200 panic=-1 quiet {args}
  initrd /initrd.gz
}}
"""


class RamdiskUnavailable(RuntimeError):
    pass


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None] + (
        [] if BUSYBOX.exists() else [str(BUSYBOX)])


def build(cache: Path, args: str = "") -> Path:
    """The ISO for these kernel arguments, from the cache when its inputs are unchanged."""
    missing = missing_tools()
    if missing:
        raise RamdiskUnavailable("the deploy ramdisk needs " + ", ".join(missing)
                                 + " (Debian: grub-pc-bin, xorriso, mtools, cpio, "
                                 "busybox-static)")
    kernel, modules = lab_kernel(cache), lab_modules(cache)
    digest = hashlib.sha256()
    for part in (kernel.name.encode(), BUSYBOX.read_bytes(), INIT.encode(), UDHCPC.encode(),
                 GRUB_CFG.encode(), args.encode(), (modules / "order").read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    iso = cache / f"ramdisk-{digest.hexdigest()[:16]}.iso"
    if iso.exists():
        return iso
    with tempfile.TemporaryDirectory(prefix="gpulease-ramdisk-", dir=cache) as tmp:
        root, tree = Path(tmp) / "initrd", Path(tmp) / "iso"
        (root / "bin").mkdir(parents=True)
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        shutil.copytree(modules, root / "modules")
        for name, text in (("init", INIT), ("udhcpc.sh", UDHCPC)):
            (root / name).write_text(text)
            (root / name).chmod(0o755)
        (tree / "boot" / "grub").mkdir(parents=True)
        shutil.copy2(kernel, tree / "vmlinuz")
        listing = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True)
        archive = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root,
                                 input=listing.stdout, capture_output=True, check=True)
        (tree / "initrd.gz").write_bytes(gzip.compress(archive.stdout, 6))
        (tree / "boot" / "grub" / "grub.cfg").write_text(GRUB_CFG.format(args=args))
        made = subprocess.run(["grub-mkrescue", "-o", str(iso) + ".part", str(tree)],
                              capture_output=True, text=True, timeout=300)
        if made.returncode != 0:
            raise RamdiskUnavailable("grub-mkrescue failed: " + made.stderr[-500:])
        Path(str(iso) + ".part").rename(iso)
    return iso
