"""The handover: the tenant's SSH keys and root password put in place on a server that
passed its acceptance suite (the configure command, after verify). Until then root has no
key and a locked password, so a tenant cannot log in to a server still under test, nor
stop the agent that tests it.

`authorized_keys` gets exactly the order's keys; the password's hash (bcrypt, made by the
control plane: the password itself never reaches the server) goes into root's entry of
`/etc/shadow`, which unlocks it. Both are written to a temporary file and renamed over the
old one, keeping its mode and owner: a crash leaves the old file or the new, never half."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gpulease.domain.errors import InvalidInput
from gpulease.domain.ssh import check_ssh_key


def authorized_keys(system_root: Path) -> Path:
    return system_root / "root" / ".ssh" / "authorized_keys"


def install_keys(system_root: Path, keys: Sequence[str]) -> None:
    """root's authorized_keys holds `keys`, one a line, and nothing else."""
    try:  # checked at order time; checked again where it becomes a line of the file
        keys = [check_ssh_key(key) for key in keys]
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
    path = authorized_keys(system_root)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    _replace(path, "".join(f"{key}\n" for key in keys), 0o600)


def set_root_password(system_root: Path, password_hash: str) -> None:
    """root's password is the one hashed in `password_hash` (and unlocked)."""
    if not password_hash.startswith("$") or any(c in password_hash for c in ":\n"):
        raise ValueError("the root password's hash is not a crypt(3) hash")
    shadow = system_root / "etc" / "shadow"
    lines = shadow.read_text().splitlines(keepends=True)
    for n, line in enumerate(lines):
        fields = line.rstrip("\n").split(":")
        if fields[0] == "root" and len(fields) >= 2:
            fields[1] = password_hash
            lines[n] = ":".join(fields) + "\n"
            break
    else:
        raise ValueError(f"{shadow} has no entry for root")
    _replace(shadow, "".join(lines), None)


def _replace(path: Path, text: str, mode: int | None) -> None:
    """`path` holds `text`, renamed into place; its mode and owner as they were (or `mode`
    for a new file)."""
    old = path.stat() if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode if mode is not None else
                 (old.st_mode & 0o7777 if old is not None else 0o600))
        if mode is None and old is not None:
            os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
