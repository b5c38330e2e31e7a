"""A data disk under the tenant's own LUKS2 key, on real loop devices with cryptsetup:
formatted with a key the platform never holds, its key slots destroyed first at the erase
(the certificate says a cryptographic erase, Purge), then overwritten like any disk. This
host has no device mapper, so unlocking (cryptsetup open) is refused here: the command
says so and exits 1, after the format it did."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulease.agent import disk_keys, erase
from gpulease.configdrive import ConfigDriveSpec, user_data
from tests.fixtures.disks import PATTERN, fill, read_all


@pytest.fixture
def cryptsetup() -> None:
    if shutil.which("cryptsetup") is None:
        pytest.fail("cryptsetup is needed (.ci/run installs it)")


def test_the_erase_destroys_the_tenants_key_slots_first(
        loop_device: Callable[[int], str], cryptsetup: None, tmp_path: Path) -> None:
    dev = loop_device(48)
    fill(dev)
    disk_keys.format_encrypted(dev, b"only the tenant knows", fast_kdf=True)
    assert disk_keys.is_luks(dev) and disk_keys.key_slots(dev) == [0]
    with pytest.raises(disk_keys.DiskKeyError, match="empty key"):
        disk_keys.format_encrypted(dev, b"")

    cert = erase.erase_device(dev, node="n1", lease="i-abc")
    assert cert.key_slots_destroyed == 1
    assert cert.method == "luks2-keyslots+discard+overwrite" and cert.nist_level == "Purge"
    assert cert.tool.startswith("cryptsetup luksErase") and cert.passed
    data = read_all(dev)
    assert data.count(0) == len(data) and not disk_keys.is_luks(dev)

    plain = loop_device(8)  # a disk without a header: erased as before
    fill(plain)
    assert erase.erase_device(plain).key_slots_destroyed is None


def test_key_slots_destroyed_leave_nothing_to_unlock_with(
        loop_device: Callable[[int], str], cryptsetup: None) -> None:
    dev = loop_device(24)
    disk_keys.format_encrypted(dev, b"k1", fast_kdf=True)
    assert disk_keys.destroy_key_slots(dev) == 1
    assert disk_keys.is_luks(dev) and disk_keys.key_slots(dev) == []  # the header, no key
    with pytest.raises(disk_keys.DiskKeyError, match="this key opens no key slot"):
        disk_keys.unlock(dev, b"k1")


def test_the_tenant_encrypts_the_data_disk_with_a_key_file(
        loop_device: Callable[[int], str], cryptsetup: None, tmp_path: Path) -> None:
    dev = loop_device(24)
    key = tmp_path / "data.key"
    key.write_bytes(b"tenant-held key material")
    refused = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "agent",
                              "encrypt-data", dev, "--key-file", str(key)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert not disk_keys.is_luks(dev)
    done = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "agent",
                           "encrypt-data", dev, "--key-file", str(key), "--yes"],
                          capture_output=True, text=True, timeout=300)
    assert "LUKS2, key slot 0 holds your key" in done.stdout, done.stdout + done.stderr
    assert disk_keys.key_slots(dev) == [0]
    # no device mapper on this host: the open is refused, and said
    assert done.returncode == 1 and "cryptsetup open" in done.stderr
    assert "the key is right: this host has no device mapper" in " ".join(done.stderr.split())
    assert PATTERN not in read_all(dev)[:4096]


def test_an_encrypted_data_order_leaves_the_disk_unformatted() -> None:
    spec = dict(instance_id="i-1", hostname="h", ssh_keys=("ssh-ed25519 AAAA k",),
                root_password="pw", agent_url="http://cp", agent_token="glat_x")
    plain = json.loads(user_data(ConfigDriveSpec(**spec)).removeprefix("#cloud-config\n"))
    assert plain["fs_setup"] and plain["mounts"]
    sealed = json.loads(user_data(ConfigDriveSpec(**spec, encrypted_data=True))
                        .removeprefix("#cloud-config\n"))
    assert "fs_setup" not in sealed and "mounts" not in sealed and "disk_setup" not in sealed
    motd = [f for f in sealed["write_files"] if f["path"].startswith("/etc/motd.d/")]
    assert "gpulease agent encrypt-data /dev/nvme1n1" in motd[0]["content"]


@pytest.mark.parametrize("kind", ["random key file", "Chinese passphrase"])
def test_the_tenants_key_opens_the_disk_with_plain_cryptsetup(
        loop_device: Callable[[int], str], cryptsetup: None, tmp_path: Path, kind: str) -> None:
    """The key reaches cryptsetup as the very bytes the tenant holds: a key file's content
    (any byte, newlines included) and a passphrase's UTF-8, as a rescue system or crypttab
    would give it, not re-encoded on the way."""
    dev = loop_device(24)
    key_file = tmp_path / "data.key"
    if kind == "random key file":
        key = bytes(range(256))[::4] + b"\n\xff\xfe\x00\x80" * 3
        key = key[:64]
        key_file.write_bytes(key)
        plain = ["--key-file", str(key_file)]
        typed = None
    else:
        key = "只有我知道的口令，二〇二六".encode()
        plain, typed = [], key + b"\n"  # typed at cryptsetup's own prompt
    disk_keys.format_encrypted(dev, key, fast_kdf=True)
    opened = subprocess.run(["cryptsetup", "open", "--test-passphrase", "--type", "luks2",
                             *plain, dev], input=typed, capture_output=True, timeout=120)
    assert opened.returncode == 0, opened.stderr
    assert disk_keys.key_opens(dev, key)
    assert not disk_keys.key_opens(dev, key[:-1] + b"?")
