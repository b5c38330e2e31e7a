"""A root file system folder laid out as a bootable raw disk image, with no loop device,
mount or device-mapper: an MBR partition table (sfdisk on the file), a FAT boot partition
holding the kernel, its initramfs and SYSLINUX (installed by its mtools installer), and an
ext4 root partition made from the folder by `mkfs.ext4 -d`; both written into the image
at their offsets, and SYSLINUX's MBR code in front. BIOS boots it (the lab's QEMU servers,
and most real servers in legacy mode)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SECTOR = 512
FIRST_SECTOR = 2048  # 1 MiB: where partitions start
BOOT_MIB = 128
ROOT_LABEL = "gl-root"
MBR_CODE = Path("/usr/lib/syslinux/mbr/mbr.bin")
TOOLS = ("sfdisk", "mkfs.vfat", "mcopy", "syslinux", "mkfs.ext4")


@dataclass(frozen=True)
class Boot:
    """What the boot partition starts: the kernel, its initramfs, and the command line."""

    kernel: Path
    initrd: Path
    append: str


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None] + (
        [] if MBR_CODE.exists() else [str(MBR_CODE)])


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stderr.strip()[-500:]}")


def _tree_bytes(root: Path) -> int:
    out = subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def syslinux_cfg(boot: Boot) -> str:
    return ("SERIAL 0 115200\nDEFAULT linux\nTIMEOUT 10\nPROMPT 0\nLABEL linux\n"
            f"  KERNEL /{boot.kernel.name}\n"
            f"  APPEND initrd=/{boot.initrd.name} root=LABEL={ROOT_LABEL} {boot.append}\n")


def assemble(root: Path, boot: Boot, out: Path) -> int:
    """Writes the image to `out`; returns its size in bytes. The root partition is the
    tree's size, 15 % more and 128 MiB (ext4's own tables and a little room), rounded to
    MiB: the image stays small to write, and the first boot grows it to the disk."""
    used = _tree_bytes(root)
    root_mib = -(-(used * 115 // 100 + 128 * 2**20) // 2**20)
    with tempfile.TemporaryDirectory(prefix="gpulease-image-", dir=out.parent) as tmp:
        boot_img, root_img = Path(tmp) / "boot.fat", Path(tmp) / "root.ext4"
        _run("mkfs.vfat", "-C", "-n", "GL-BOOT", str(boot_img), str(BOOT_MIB * 1024))
        (Path(tmp) / "syslinux.cfg").write_text(syslinux_cfg(boot))
        _run("mcopy", "-i", str(boot_img), str(boot.kernel), str(boot.initrd),
             str(Path(tmp) / "syslinux.cfg"), "::/")
        _run("syslinux", "--install", str(boot_img))
        _run("mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root), str(root_img),
             f"{root_mib}M")
        boot_start = FIRST_SECTOR
        root_start = boot_start + BOOT_MIB * 2**20 // SECTOR
        total = (root_start * SECTOR) + root_mib * 2**20
        part = Path(tmp) / "image.part"
        with part.open("wb") as f:
            f.truncate(total)
        table = (f"label: dos\nstart={boot_start}, size={BOOT_MIB * 2**20 // SECTOR}, "
                 f"type=c, bootable\nstart={root_start}, type=83\n")
        done = subprocess.run(["sfdisk", "--no-reread", "--no-tell-kernel", "-q", str(part)],
                              input=table, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"sfdisk failed: {done.stderr.strip()[-500:]}")
        with part.open("r+b") as f:
            f.write(MBR_CODE.read_bytes()[:440])  # before the partition table at 446
            for start, piece in ((boot_start, boot_img), (root_start, root_img)):
                f.seek(start * SECTOR)
                with piece.open("rb") as src:
                    while chunk := src.read(4 * 2**20):
                        if chunk.count(0) == len(chunk):
                            f.seek(len(chunk), 1)  # keep the image sparse
                        else:
                            f.write(chunk)
        part.rename(out)
    return out.stat().st_size
