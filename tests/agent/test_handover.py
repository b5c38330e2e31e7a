"""The handover at configure: root's authorized_keys holds exactly the order's keys (0600 in
a 0700 .ssh), root's shadow entry takes the password's hash and every other line stays as
it was (mode and owner kept); a key that is not one OpenSSH line, a value that is not a
crypt(3) hash, or a shadow without root is refused, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import bcrypt
import pytest

from gpulease.agent.handover import authorized_keys, install_keys, set_root_password
from gpulease.configdrive import hash_root_password
from gpulease.testing.callers import ssh_key

SHADOW = "root:!:20000:0:99999:7:::\ndaemon:*:20000:0:99999:7:::\n"


def _system(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    shadow = tmp_path / "etc" / "shadow"
    shadow.write_text(SHADOW)
    shadow.chmod(0o640)
    return tmp_path


def test_the_keys_are_the_orders_and_nothing_else(tmp_path: Path) -> None:
    system = _system(tmp_path)
    path = authorized_keys(system)
    path.parent.mkdir(parents=True)
    path.write_text("ssh-ed25519 AAAA-left-by-someone-else\n")
    keys = [ssh_key("a"), ssh_key("b")]
    install_keys(system, keys)
    assert path.read_text().splitlines() == keys
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in path.parent.iterdir()] == ["authorized_keys"]  # no temp left


def test_a_key_of_two_lines_is_refused_and_nothing_written(tmp_path: Path) -> None:
    system = _system(tmp_path)
    with pytest.raises(ValueError, match="one line"):
        install_keys(system, [ssh_key("a") + "\ncommand=\"sh\" " + ssh_key("b")])
    assert not authorized_keys(system).exists()


def test_the_password_hash_unlocks_root_and_leaves_the_rest(tmp_path: Path) -> None:
    system = _system(tmp_path)
    shadow = system / "etc" / "shadow"
    before = shadow.stat()
    set_root_password(system, hash_root_password("Corr3ct-horse"))
    root, daemon = shadow.read_text().splitlines()
    fields = root.split(":")
    assert fields[0] == "root" and fields[2:] == ["20000", "0", "99999", "7", "", "", ""]
    assert bcrypt.checkpw(b"Corr3ct-horse", fields[1].encode())
    assert daemon == "daemon:*:20000:0:99999:7:::"
    after = shadow.stat()
    assert (after.st_mode & 0o777, after.st_uid, after.st_gid) == (
        before.st_mode & 0o777, before.st_uid, before.st_gid)


@pytest.mark.parametrize("value", ["plain-text", "$2b$x:injected", "$2b$x\nroot2::0:"])
def test_a_value_that_is_not_a_hash_is_refused(tmp_path: Path, value: str) -> None:
    system = _system(tmp_path)
    with pytest.raises(ValueError, match="crypt"):
        set_root_password(system, value)
    assert (system / "etc" / "shadow").read_text() == SHADOW


def test_a_shadow_without_root_is_refused(tmp_path: Path) -> None:
    system = _system(tmp_path)
    (system / "etc" / "shadow").write_text("daemon:*:20000:0:99999:7:::\n")
    with pytest.raises(ValueError, match="no entry for root"):
        set_root_password(system, hash_root_password("x"))
    assert os.listdir(system / "etc") == ["shadow"]
