"""Disk erase on release, after NIST SP 800-88 Rev. 1, with a certificate per device.

Method per device, strongest first:
  1. NVMe Format with cryptographic erase (`nvme format --ses=2`)      Purge
  2. NVMe Format with user-data erase (`nvme format --ses=1`)          Purge
  3. discard (`blkdiscard`), then overwrite with zeros                 Clear
  4. overwrite with zeros                                              Clear
then verification by reads sampled across the whole device (first and last block
included). A device that fails verification gets a certificate that says so."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import random
import socket
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpulease import __version__ as GPULEASE_VERSION
from gpulease.agent import disk_keys

BLOCK = 4 * 2**20  # overwrite chunk
SAMPLE = 4096  # one verification read
Runner = Callable[[Sequence[str]], str]


class EraseError(RuntimeError):
    pass


def run_tool(cmd: Sequence[str]) -> str:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=24 * 3600)
    if done.returncode != 0:
        raise EraseError(f"{' '.join(cmd)} failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


@dataclass(frozen=True)
class Device:
    path: str
    size_bytes: int
    model: str | None = None
    serial: str | None = None
    vendor: str | None = None
    transport: str | None = None  # nvme | sata | sas | usb | None (loop, virtual)
    discard: bool = False
    sanicap: int = 0  # NVMe Identify Controller: sanitize capabilities
    fna: int = 0  # NVMe Identify Controller: format NVM attributes


@dataclass(frozen=True)
class Method:
    name: str  # nvme-crypto-erase | nvme-user-data-erase | discard+overwrite | overwrite
    nist_level: str  # Purge | Clear
    tool: str

    @property
    def overwrites(self) -> bool:
        return self.name in ("discard+overwrite", "overwrite")


def _tool_version(cmd: Sequence[str], runner: Runner) -> str:
    try:
        return runner(cmd).strip().splitlines()[0]
    except (EraseError, OSError, IndexError):
        return "unknown version"


def inspect_device(path: str, runner: Runner = run_tool) -> Device:
    """What the erase needs to know about a block device (lsblk, and nvme id-ctrl)."""
    if not Path(path).exists():
        raise EraseError(f"{path}: no such device")
    out = json.loads(runner(["lsblk", "--json", "--bytes", "--nodeps", "--output",
                             "PATH,SIZE,MODEL,SERIAL,VENDOR,TRAN,DISC-MAX,TYPE", path]))
    info = out["blockdevices"][0]
    if info.get("type") not in ("disk", "loop"):
        raise EraseError(f"{path} is a {info.get('type')}, not a whole disk; "
                         "name the disk itself (e.g. /dev/nvme0n1)")
    transport = info.get("tran")
    sanicap = fna = 0
    if path.startswith("/dev/nvme") or transport == "nvme":
        transport = "nvme"
        ctrl = json.loads(runner(["nvme", "id-ctrl", path, "--output-format=json"]))
        sanicap, fna = int(ctrl.get("sanicap", 0)), int(ctrl.get("fna", 0))
    return Device(path=path, size_bytes=int(info["size"]),
                  model=(info.get("model") or "").strip() or None,
                  serial=(info.get("serial") or "").strip() or None,
                  vendor=(info.get("vendor") or "").strip() or None,
                  transport=transport, discard=int(info.get("disc-max") or 0) > 0,
                  sanicap=sanicap, fna=fna)


def choose_method(dev: Device, runner: Runner = run_tool) -> Method:
    if dev.transport == "nvme":
        nvme = f"nvme-cli {_tool_version(['nvme', 'version'], runner)}"
        if dev.fna & 0x4:  # FNA bit 2: cryptographic erase supported as part of Format
            return Method("nvme-crypto-erase", "Purge", nvme)
        return Method("nvme-user-data-erase", "Purge", nvme)
    own = f"gpulease-agent {GPULEASE_VERSION} (zero overwrite)"
    if dev.discard:
        util = _tool_version(["blkdiscard", "--version"], runner)
        return Method("discard+overwrite", "Clear", f"{util}; {own}")
    return Method("overwrite", "Clear", own)


def _overwrite(path: str, size: int) -> None:
    zeros = bytes(BLOCK)
    fd = os.open(path, os.O_WRONLY)
    try:
        written = 0
        while written < size:
            n = os.write(fd, zeros[: min(BLOCK, size - written)])
            if n <= 0:
                raise EraseError(f"{path}: write returned {n} at byte {written}")
            written += n
        os.fsync(fd)
    finally:
        os.close(fd)
    _drop_cache(path)


def _drop_cache(path: str) -> None:
    """Flush the device's buffer cache so verification reads what the disk holds."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def sample_offsets(size: int, samples: int, seed: int) -> list[int]:
    """Offsets of the verification reads: first and last block, the rest spread at random
    across the device (aligned to the read size)."""
    blocks = max(size // SAMPLE, 1)
    rng = random.Random(seed)
    picks = {0, blocks - 1} | {rng.randrange(blocks) for _ in range(max(samples - 2, 0))}
    return sorted(b * SAMPLE for b in picks)


def _read_samples(path: str, offsets: Sequence[int]) -> list[bytes]:
    """Read each sample from the device itself (O_DIRECT, past the page cache, which would
    otherwise answer with what this process just wrote)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        fd = os.open(path, os.O_RDONLY)  # a file system without O_DIRECT (tests on tmpfs)
    buf = mmap.mmap(-1, SAMPLE)  # page-aligned, as O_DIRECT requires
    try:
        out = []
        for off in offsets:
            n = os.preadv(fd, [buf], off)
            out.append(bytes(buf[:n]))
        return out
    finally:
        buf.close()
        os.close(fd)


@dataclass
class Verification:
    samples: int
    bytes_read: int
    passed: bool
    expectation: str
    failures: list[int] = field(default_factory=list)  # offsets that did not verify


def verify(dev: Device, method: Method, before: Sequence[bytes], offsets: Sequence[int]
           ) -> Verification:
    """Overwrite: every sampled byte must be zero. Crypto / user-data erase: a sampled block
    that held data before must no longer hold the same bytes."""
    after = _read_samples(dev.path, offsets)
    failures = []
    for off, old, new in zip(offsets, before, after, strict=True):
        if method.overwrites:
            if new.count(0) != len(new):
                failures.append(off)
        elif any(old) and new == old:
            failures.append(off)
    expectation = ("all sampled bytes read as zero" if method.overwrites
                   else "no sampled block still holds its pre-erase content")
    return Verification(len(offsets), sum(len(b) for b in after), not failures,
                        expectation, failures[:20])


@dataclass
class Certificate:
    id: str
    device: str
    make: str | None
    model: str | None
    serial: str | None
    size_bytes: int
    method: str
    nist_level: str
    tool: str
    verification: dict[str, Any]
    passed: bool
    started_at: str
    ended_at: str
    node: str
    lease: str | None
    # the tenant's LUKS2 key slots destroyed before the erase (None: not encrypted)
    key_slots_destroyed: int | None = None
    standard: str = "NIST SP 800-88 Rev. 1"
    digest: str = ""  # SHA-256 of the certificate body, for tamper evidence

    def seal(self) -> Certificate:
        body = {k: v for k, v in asdict(self).items() if k != "digest"}
        self.digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def erase_device(path: str, *, node: str | None = None, lease: str | None = None,
                 samples: int = 256, runner: Runner = run_tool,
                 method: Method | None = None) -> Certificate:
    """Erase one whole device and certify it. Raises EraseError when the erase itself fails;
    a verification failure is recorded in the certificate (passed = False)."""
    started = datetime.now(UTC)
    dev = inspect_device(path, runner)
    method = method or choose_method(dev, runner)
    offsets = sample_offsets(dev.size_bytes, samples, seed=int(started.timestamp()))
    before = _read_samples(dev.path, offsets)
    slots = None
    if disk_keys.is_luks(dev.path):  # the tenant's own key: its slots go first
        try:
            slots = disk_keys.destroy_key_slots(dev.path)
        except disk_keys.DiskKeyError as exc:
            raise EraseError(str(exc)) from exc
    if method.name == "nvme-crypto-erase":
        runner(["nvme", "format", dev.path, "--ses=2", "--force"])
    elif method.name == "nvme-user-data-erase":
        runner(["nvme", "format", dev.path, "--ses=1", "--force"])
    else:
        if method.name == "discard+overwrite":
            runner(["blkdiscard", "--force", dev.path])
        _overwrite(dev.path, dev.size_bytes)
    check = verify(dev, method, before, offsets)
    crypto = slots is not None
    return Certificate(
        id=uuid.uuid4().hex, device=dev.path, make=dev.vendor, model=dev.model,
        serial=dev.serial, size_bytes=dev.size_bytes,
        method=f"luks2-keyslots+{method.name}" if crypto else method.name,
        # without a key slot nobody can decrypt it: a cryptographic erase (Purge)
        nist_level="Purge" if crypto else method.nist_level,
        tool=f"cryptsetup luksErase; {method.tool}" if crypto else method.tool,
        verification=asdict(check), passed=check.passed, started_at=started.isoformat(),
        ended_at=datetime.now(UTC).isoformat(), node=node or socket.gethostname(),
        lease=lease, key_slots_destroyed=slots).seal()


def tenant_disks(runner: Runner = run_tool) -> list[str]:
    """Every whole disk except the one holding the running system (the agent's ramdisk
    boot leaves all installed disks unmounted, so normally: all of them)."""
    out = json.loads(runner(["lsblk", "--json", "--output", "PATH,TYPE,MOUNTPOINTS"]))
    disks = []
    for d in out["blockdevices"]:
        if d.get("type") != "disk":
            continue
        mounts = [m for m in _all_mounts(d) if m]
        if "/" not in mounts:
            disks.append(d["path"])
    return disks


def _all_mounts(dev: dict[str, Any]) -> list[str]:
    found = list(dev.get("mountpoints") or [])
    for child in dev.get("children") or []:
        found += _all_mounts(child)
    return found


SIMULATED_DISKS = ("/dev/nvme0n1", "/dev/nvme1n1")


def simulated_certificates(node: str, lease: str | None,
                           devices: Sequence[str] = SIMULATED_DISKS) -> list[Certificate]:
    """Certificates of a simulated server's erase. They say so: no disk was touched."""
    now = datetime.now(UTC).isoformat()
    return [Certificate(
        id=uuid.uuid4().hex, device=d, make="simulated", model="simulated NVMe",
        serial=f"SIM-{node}-{i}", size_bytes=3_840_000_000_000, method="simulated",
        nist_level="none (simulated: no disk was touched)",
        tool=f"gpulease {GPULEASE_VERSION} simulated fleet",
        verification={"simulated": True, "passed": True}, passed=True, started_at=now,
        ended_at=now, node=node, lease=lease).seal() for i, d in enumerate(devices)]
