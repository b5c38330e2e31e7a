"""`gpulease image build`: a Debian system from Debian's packages (debootstrap, as
diskimage-builder's elements do), set up for a rented server's first boot: cloud-init
reading a NoCloud config drive (hostname, SSH keys, root password, the data disk) and
growing the root partition to the whole system disk, OpenSSH
with fresh host keys per server, DHCP on the first NIC, the serial console. Laid out by
disk.py, recorded with its size and SHA-256, and kept in a cache named by the hash of its
inputs (the same inputs are built once)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from gpulease.osimage import disk

# The build's own version: change it when its steps change (the cache follows).
BUILDER = "gpulease-image-build/1"
PACKAGES = ("linux-image-cloud-amd64", "systemd-sysv", "udev", "openssh-server", "cloud-init",
            "ifupdown", "isc-dhcp-client", "netbase", "iproute2", "e2fsprogs", "fdisk", "gdisk",
            # growpart: cloud-init grows the root partition to the disk at first boot
            "cloud-guest-utils",
            # virtual packages debootstrap does not resolve (python3-cryptography needs it)
            "python3-cffi-backend",
            "ca-certificates")


@dataclass(frozen=True)
class Recipe:
    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple[str, ...] = PACKAGES
    image_id: str = "debian12-lab"

    def digest(self) -> str:
        text = json.dumps([BUILDER, asdict(self), SETUP], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Built:
    image_id: str
    path: str
    size_bytes: int
    sha256: str
    recipe: str  # the inputs' hash the cache is named by
    from_cache: bool


# Files written into the tree (path → content): the first boot's whole setup.
SETUP = {
    "etc/fstab": f"LABEL={disk.ROOT_LABEL} / ext4 defaults,errors=remount-ro 0 1\n",
    "etc/hostname": "localhost\n",
    "etc/network/interfaces": ("auto lo\niface lo inet loopback\n\nauto eth0\n"
                               "iface eth0 inet dhcp\n\nsource /etc/network/interfaces.d/*\n"),
    # only the config drive: no network metadata service is asked at boot
    "etc/cloud/cloud.cfg.d/90_gpulease.cfg": ("datasource_list: [ NoCloud, None ]\n"
                                             "disable_root: false\n"),
    "etc/ssh/sshd_config.d/gpulease.conf": "PermitRootLogin yes\nPasswordAuthentication yes\n",
}
APPEND = "ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0"


def missing_tools() -> list[str]:
    return disk.missing_tools() + [t for t in ("debootstrap", "chroot")
                                   if shutil.which(t) is None]


def build(cache: Path, recipe: Recipe = Recipe(), log: Path | None = None) -> Built:
    """The image for `recipe`, from the cache when it was built before."""
    cache.mkdir(parents=True, exist_ok=True)
    name = f"{recipe.image_id}-{recipe.digest()}"
    image, manifest = cache / f"{name}.raw", cache / f"{name}.json"
    if image.exists() and manifest.exists():
        return Built(**{**json.loads(manifest.read_text()), "from_cache": True})
    missing = missing_tools()
    if missing:
        raise RuntimeError("image build needs " + ", ".join(missing) + " (Debian: "
                           "debootstrap, fdisk, dosfstools, mtools, syslinux, "
                           "syslinux-common, e2fsprogs)")
    with tempfile.TemporaryDirectory(prefix="gpulease-rootfs-", dir=cache) as tmp:
        root = Path(tmp) / "root"
        with (log or Path(tmp) / "debootstrap.log").open("w") as out:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=" + ",".join(recipe.packages),
                 recipe.suite, str(root), recipe.mirror], stdout=out, stderr=out,
                timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed (exit {done.returncode}); see its log")
        _set_up(root)
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise RuntimeError("the tree has no /boot/vmlinuz-* and initrd.img-*")
        size = disk.assemble(root, disk.Boot(kernels[-1], initrds[-1], APPEND), image)
    sha = _sha256(image)
    built = Built(recipe.image_id, str(image), size, sha, recipe.digest(), False)
    manifest.write_text(json.dumps({k: v for k, v in asdict(built).items()
                                    if k != "from_cache"}, indent=2))
    return built


def _set_up(root: Path) -> None:
    for relative, text in SETUP.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each server makes its own at first boot (cloud-init)
    (root / "etc" / "machine-id").write_text("")  # systemd makes one at first boot
    for cached in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        cached.unlink()
    subprocess.run(["chroot", str(root), "passwd", "-l", "root"], check=True,
                   capture_output=True)  # no password until the config drive sets one


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def latest(cache: Path) -> Built | None:
    """The newest image built in `cache` (by its manifest), or None."""
    manifests = sorted(cache.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for manifest in reversed(manifests):
        try:
            built = Built(**{**json.loads(manifest.read_text()), "from_cache": True})
        except (TypeError, ValueError):
            continue
        if Path(built.path).exists():
            return built
    return None
