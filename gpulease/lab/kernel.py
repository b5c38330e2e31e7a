"""The lab's Linux kernel: Debian's cloud kernel (`linux-image-cloud-amd64`), fetched once
with `apt-get download` into the lab's cache and unpacked with `dpkg-deb`; the modules the
ramdisk loads (virtio's disk and network drivers, with what they depend on) are kept beside
it. It probes KVM (accel.py) and boots the lab's deploy ramdisk (ramdisk.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = "linux-image-cloud-amd64"
# What a virtual server's disks and NIC need (virtio is modular in Debian's cloud kernel).
MODULES = ("virtio_pci", "virtio_blk", "virtio_net")


class KernelUnavailable(RuntimeError):
    pass


def lab_kernel(cache: Path) -> Path:
    """The cached kernel, fetched first if it is not there yet."""
    found = sorted(cache.glob("vmlinuz-*"))
    if found:
        return found[-1]
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise KernelUnavailable("the lab fetches its kernel with apt-get and dpkg-deb "
                                "(Debian or Ubuntu); put a vmlinuz-* file in " + str(cache))
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpulease-kernel-", dir=cache) as tmp:
        package = _versioned(PACKAGE)
        got = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True,
                             text=True, timeout=600)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            raise KernelUnavailable(f"apt-get download {package} failed: "
                                    f"{got.stderr.strip()[-300:]}")
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(Path(tmp) / "root")], check=True,
                       timeout=300)
        kernels = sorted((Path(tmp) / "root" / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise KernelUnavailable(f"{debs[0].name} holds no /boot/vmlinuz-*")
        _keep_modules(Path(tmp) / "root" / "lib" / "modules", cache / "modules")
        target = cache / kernels[-1].name
        shutil.move(str(kernels[-1]), target)
        return target


def _keep_modules(tree: Path, into: Path) -> None:
    """MODULES and what they depend on (each module's own `depends=` in its .modinfo; the
    package ships no modules.dep, depmod makes it at install), and `order`: the load order."""
    version = next(tree.iterdir())
    by_name = {ko.name.removesuffix(".ko").replace("-", "_"): ko
               for ko in version.rglob("*.ko")}
    order: list[Path] = []

    def add(name: str) -> None:
        ko = by_name[name]
        if ko in order:
            return
        found = re.search(rb"depends=([^\0]*)\0", ko.read_bytes())
        for need in (found.group(1).decode().split(",") if found else []):
            if need:
                add(need.replace("-", "_"))
        order.append(ko)

    for name in MODULES:
        add(name)
    into.mkdir(parents=True, exist_ok=True)
    for ko in order:
        shutil.copy2(ko, into / ko.name)
    (into / "order").write_text("".join(ko.name + "\n" for ko in order))


def lab_modules(cache: Path) -> Path:
    """The folder of the kept modules (with `order`), beside the kernel."""
    lab_kernel(cache)
    return cache / "modules"


def _versioned(meta: str) -> str:
    """The versioned package a metapackage depends on (apt-get download takes no
    metapackage's dependencies)."""
    out = subprocess.run(["apt-cache", "depends", meta], capture_output=True, text=True,
                         timeout=60).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split()[1]
    return meta
