"""The lab's deploy ramdisk: a bootable ISO (GRUB for BIOS and the serial console, by
`grub-mkrescue`) holding the lab's kernel and an initramfs of Debian's static busybox, the
virtio modules and an /init that brings the NIC up by DHCP, asks the control plane at the
URL on its kernel command line for a plan (write an image, erase the disks, or nothing),
carries it out and reports (under QEMU's user-mode networking the host's loopback is
10.0.2.2). Built once per inputs: the ISO is named by their hash."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from gpulease.build_lock import building
from gpulease.lab.kernel import lab_kernel, lab_modules

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (.ci/run installs it)
TOOLS = ("grub-mkrescue", "xorriso", "cpio")

# What the ramdisk does, in busybox's sh. `gpulease.control=<url>` on the command line: once
# its NIC is up it asks <url>/plan?disks=<its disks> for one plan (key=value lines, each
# checked against its pattern before use: the answer is data, never run), carries it out,
# reports <url>/report?step=…&ok=0|1&… and powers the server off. Plans: `write` (image_url
# hashed first: a wrong checksum writes nothing; then streamed onto disk, and image_bytes of
# the disk read back and hashed against image_sha256; without image_bytes, the hash as
# fetched only; a stream cut short or a read-back that differs is tried again, three times
# in all, before it is reported), `erase` (every disk discarded, or zeroed where discard
# fails, then read back against zeros: its first 16 MiB and 1 MiB at 32 places over the
# whole disk; each disk's method, verdict and size reported), `none`.
INIT = """#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "gpulease-ramdisk: $*"; }
say up
while read -r ko; do insmod "/modules/$ko"; done < /modules/order
ip link set lo up
for nic in /sys/class/net/*; do
  nic=${nic##*/}
  [ "$nic" = lo ] && continue
  ip link set "$nic" up
  udhcpc -i "$nic" -s /udhcpc.sh -q -n -t 10 && break  # the first NIC with a lease
done
control=$(sed -n 's/.*gpulease\\.control=\\([^ ]*\\).*/\\1/p' /proc/cmdline)
disks=$(ls /sys/block | grep -E '^(vd[a-z]|sd[a-z]|nvme[0-9]+n[0-9]+)$' | tr '\\n' , )
say "disks $disks"
now() { cut -d' ' -f1 /proc/uptime | tr -d .; }  # centiseconds since the kernel started
report() { wget -q -O /dev/null "$control/report?$1&uptime_cs=$(now)" && say "reported $1"; }
action=none image_url= image_sha256= image_bytes= disk=
if wget -q -O /tmp/plan "$control/plan?disks=$disks"; then
  while IFS='=' read -r key value; do
    case "$key" in
      action) case "$value" in write|erase|none) action=$value ;; esac ;;
      image_url) case "$value" in http://*) case "$value" in
        *[!A-Za-z0-9._~:/?@!\\$\\&*+,\\;=%-]*) ;; *) image_url=$value ;; esac ;; esac ;;
      image_sha256) case "$value" in *[!0-9a-f]*|'') ;; *) [ ${#value} -eq 64 ] \\
        && image_sha256=$value ;; esac ;;
      image_bytes) case "$value" in *[!0-9]*|'') ;; *) image_bytes=$value ;; esac ;;
      disk) echo "$value" | grep -qE '^(vd[a-z]|sd[a-z]|nvme[0-9]+n[0-9]+)$' && disk=$value ;;
    esac
  done < /tmp/plan
fi
say "plan $action"
case "$action" in
  write)
    if [ -z "$image_url" ] || [ -z "$image_sha256" ] || [ -z "$disk" ]; then
      report "step=write&ok=0&why=incomplete-plan"
    elif ! fetched=$(wget -q -O - "$image_url" | sha256sum | cut -d' ' -f1) \\
       || [ "$fetched" != "$image_sha256" ]; then
      report "step=write&ok=0&why=checksum&sha256=$fetched"
    else
      # up to three tries of streaming it on and reading it back: a download cut short
      # (its pipeline fails: pipefail) or a read-back that differs is tried again before
      # the disk is blamed
      started=$(now) tries=0 ok=0 got= why=
      while [ $tries -lt 3 ] && [ $ok = 0 ]; do
        tries=$(( tries + 1 ))
        if ! ( set -o pipefail; wget -q -O - "$image_url" \\
               | dd of="/dev/$disk" bs=1M conv=fsync 2>/tmp/dd ); then
          why=download-or-write-failed
          sleep 2
          continue
        fi
        sync
        echo 3 > /proc/sys/vm/drop_caches
        if [ -z "$image_bytes" ]; then  # its size unknown: checked as it was fetched only
          got=$fetched ok=1 why=
        else
          got=$(head -c "$image_bytes" "/dev/$disk" | sha256sum | cut -d' ' -f1)
          if [ "$got" = "$image_sha256" ]; then ok=1 why=; else why=readback; fi
        fi
      done
      written=$(( $(now) - started ))
      readback=${image_bytes:-none}
      if [ $ok = 1 ]; then
        report "step=write&ok=1&sha256=$got&readback=$readback&disk=$disk\\
&write_cs=$written&tries=$tries"
      else
        report "step=write&ok=0&why=$why&sha256=$got&disk=$disk&tries=$tries"
      fi
    fi ;;
  erase)
    zeros=$(head -c 16777216 /dev/zero | sha256sum | cut -d' ' -f1)
    mib=$(head -c 1048576 /dev/zero | sha256sum | cut -d' ' -f1)
    ok=1 methods= results= started=$(now)
    for d in $(echo "$disks" | tr , ' '); do
      if blkdiscard "/dev/$d" 2>/dev/null; then m=discard
      else dd if=/dev/zero of="/dev/$d" bs=1M conv=fsync 2>/dev/null; m=zero; fi
      sync
      echo 3 > /proc/sys/vm/drop_caches
      # read back: the first 16 MiB, then 1 MiB at 32 places spread over the whole disk
      size_mib=$(( $(cat "/sys/block/$d/size") / 2048 ))
      good=1
      [ "$(head -c 16777216 "/dev/$d" | sha256sum | cut -d' ' -f1)" = "$zeros" ] || good=0
      i=0
      while [ $i -lt 32 ]; do
        at=$(( size_mib * i / 32 ))
        [ "$(dd if="/dev/$d" bs=1M skip=$at count=1 2>/dev/null | sha256sum \\
              | cut -d' ' -f1)" = "$mib" ] || good=0
        i=$(( i + 1 ))
      done
      [ $good = 1 ] || ok=0
      methods="$methods$d:$m,"
      results="$results$d:$m:$good:$size_mib,"
    done
    took=$(( $(now) - started ))
    report "step=erase&ok=$ok&methods=$methods&results=$results&samples=33&erase_cs=$took" ;;
  none) report "step=none&ok=1&disks=$disks" ;;
esac
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


_BUILDING = threading.Lock()  # deploys side by side share the kernel and the cache


def build(cache: Path, args: str = "") -> Path:
    """The ISO for these kernel arguments, from the cache when its inputs are unchanged."""
    with _BUILDING, building(cache / "ramdisk.lock"):  # threads, and other processes
        return _build(cache, args)


def _build(cache: Path, args: str) -> Path:
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
