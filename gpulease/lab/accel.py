"""Which accelerator the lab's VMs run on: KVM where a Linux guest really runs under it,
QEMU's TCG (software emulation) otherwise. `/dev/kvm` being there is not enough: under
nested virtualisation the device can open, run a boot sector, and still hang every Linux
kernel before its first line. So the lab's own kernel is booted under KVM and must print
its banner on the serial port within a few seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

QEMU = "qemu-system-x86_64"
PROBE_S = 10.0
BANNER = b"Linux version"


@dataclass(frozen=True)
class Accel:
    kind: str  # "kvm" or "tcg"
    why: str

    @property
    def domain_type(self) -> str:
        """libvirt's <domain type=…>."""
        return "kvm" if self.kind == "kvm" else "qemu"


def detect(kernel: Path | None, forced: str | None = None) -> Accel:
    """`kernel`: a Linux kernel to probe KVM with; `forced` ("kvm" or "tcg", from
    GPULEASE_LAB_ACCEL) skips the probe."""
    if forced in ("kvm", "tcg"):
        return Accel(forced, "chosen by GPULEASE_LAB_ACCEL")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accel("tcg", "no usable /dev/kvm: software emulation (TCG)")
    if shutil.which(QEMU) is None:
        return Accel("tcg", f"{QEMU} not found")
    if kernel is None:
        return Accel("tcg", "no kernel to probe KVM with: software emulation (TCG)")
    if kernel_prints(kernel, "kvm"):
        return Accel("kvm", "a Linux kernel ran under KVM")
    return Accel("tcg", "/dev/kvm is there but a Linux kernel printed nothing under it "
                        f"in {PROBE_S:g} s (nested virtualisation?): software emulation (TCG)")


def kernel_prints(kernel: Path, accel: str, within_s: float = PROBE_S) -> bool:
    """Does `kernel` print its banner on the serial port under `accel` within `within_s`?"""
    with tempfile.TemporaryDirectory(prefix="gpulease-accel-") as tmp:
        serial = Path(tmp) / "serial.log"
        proc = subprocess.Popen(
            [QEMU, "-accel", accel, "-machine", "pc", "-m", "256", "-nodefaults",
             "-display", "none", "-no-reboot", "-serial", f"file:{serial}",
             "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + within_s
            while time.monotonic() < deadline:
                if serial.exists() and BANNER in serial.read_bytes():
                    return True
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            return serial.exists() and BANNER in serial.read_bytes()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
