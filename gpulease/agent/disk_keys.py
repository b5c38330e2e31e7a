"""A data disk encrypted with a key only its tenant holds (LUKS2, cryptsetup): the tenant
formats and unlocks it on their server with a passphrase they type or a key file they
keep (`gpulease agent encrypt-data`, `gpulease agent unlock-data`); the platform never sees
either. When the server is handed back, the erase destroys every key slot first (`cryptsetup
luksErase`): without a key slot the data cannot be decrypted by anyone (a cryptographic
erase, NIST SP 800-88 Purge), and the certificate says so; the usual erase follows."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

MAPPED_NAME = "gl-data"  # /dev/mapper/gl-data once unlocked
MAGIC = b"LUKS\xba\xbe"  # the first bytes of a LUKS (1 or 2) header
# LUKS2 `luksDump` lists key slots under "Keyslots:" as "  0: luks2".
_SLOT = re.compile(r"^\s+(\d+): luks2", re.MULTILINE)


class DiskKeyError(RuntimeError):
    pass


def _run(cmd: Sequence[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """`cmd` with `stdin` given as the very bytes (a key file's, a passphrase's UTF-8):
    cryptsetup reads a key from `--key-file -` byte for byte, so a re-encoded key would
    be another key that plain cryptsetup (a rescue system, crypttab) could not use."""
    try:
        done = subprocess.run(list(cmd), input=stdin, capture_output=True, timeout=600,
                              check=False)
    except FileNotFoundError:
        raise DiskKeyError(f"{cmd[0]} is not installed (Debian and Ubuntu: the cryptsetup "
                           "package)") from None
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def is_luks(path: str) -> bool:
    """Whether the device starts with a LUKS header (read, no tool needed)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def key_slots(path: str) -> list[int]:
    """The LUKS2 header's key slots in use (empty after luksErase)."""
    done = _run(["cryptsetup", "luksDump", path])
    if done.returncode != 0:
        raise DiskKeyError(f"cryptsetup luksDump {path}: {(done.stderr or done.stdout).strip()}")
    section = done.stdout.split("Keyslots:", 1)[1] if "Keyslots:" in done.stdout else ""
    section = section.split("Tokens:", 1)[0]
    return [int(n) for n in _SLOT.findall(section)]


def destroy_key_slots(path: str) -> int:
    """Every key slot of the LUKS header destroyed; returns how many there were. Raises
    DiskKeyError when one is left."""
    slots = key_slots(path)
    done = _run(["cryptsetup", "luksErase", "--batch-mode", path])
    if done.returncode != 0:
        raise DiskKeyError(f"cryptsetup luksErase {path}: {(done.stderr or done.stdout).strip()}")
    left = key_slots(path)
    if left:
        raise DiskKeyError(f"key slots {left} of {path} are still there after luksErase")
    return len(slots)


def format_encrypted(path: str, key: bytes, *, fast_kdf: bool = False) -> None:
    """A new LUKS2 header on `path` with `key` in slot 0 (what was on the disk is lost).
    `fast_kdf` (tests only) trades the key derivation's cost for speed."""
    if not key:
        raise DiskKeyError("an empty key encrypts nothing: give a passphrase or a key file")
    kdf = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"] if fast_kdf else []
    done = _run(["cryptsetup", "luksFormat", "--type", "luks2", "--batch-mode",
                 "--key-file", "-", *kdf, path], stdin=key)
    if done.returncode != 0:
        raise DiskKeyError(f"cryptsetup luksFormat {path}: "
                           f"{(done.stderr or done.stdout).strip()}")


def key_opens(path: str, key: bytes) -> bool:
    """Whether `key` opens a key slot of the header (no device mapper needed: nothing is
    mapped)."""
    done = _run(["cryptsetup", "open", "--test-passphrase", "--type", "luks2",
                 "--key-file", "-", path], stdin=key)
    return done.returncode == 0


def unlock(path: str, key: bytes) -> str:
    """Open the encrypted disk as /dev/mapper/gl-data (needs the kernel's device mapper)."""
    done = _run(["cryptsetup", "open", "--type", "luks2", "--key-file", "-", path,
                 MAPPED_NAME], stdin=key)
    if done.returncode != 0:
        why = ("the key is right: this host has no device mapper to open it on"
               if key_opens(path, key) else "this key opens no key slot")
        raise DiskKeyError(f"cryptsetup open {path}: {(done.stderr or done.stdout).strip()} "
                           f"({why})")
    return f"/dev/mapper/{MAPPED_NAME}"
