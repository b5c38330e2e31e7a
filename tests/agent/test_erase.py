"""Erase on real loop devices: filled with a pattern, erased, read back by the test."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import pytest

from gpulease.agent import erase
from tests.fixtures.disks import PATTERN, fill, read_all


def test_cli_erases_a_loop_device_and_writes_a_certificate(
        loop_device: Callable[[int], str], tmp_path: Path) -> None:
    dev = loop_device(48)
    size = fill(dev)
    assert PATTERN in read_all(dev)
    cert_file = tmp_path / "cert.json"
    done = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "agent", "erase", dev,
                           "--yes", "--certificate", str(cert_file), "--lease", "i-abc"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    data = read_all(dev)
    assert len(data) == size and data.count(0) == size  # every byte read back is zero
    cert = json.loads(cert_file.read_text())
    assert cert["device"] == dev and cert["size_bytes"] == size and cert["lease"] == "i-abc"
    assert cert["method"] == "discard+overwrite" and cert["nist_level"] == "Clear"
    assert "util-linux" in cert["tool"] and cert["standard"] == "NIST SP 800-88 Rev. 1"
    assert cert["passed"] and cert["verification"]["passed"]
    assert cert["verification"]["samples"] >= 200
    assert cert["started_at"] <= cert["ended_at"]
    body = {k: v for k, v in cert.items() if k != "digest"}
    assert cert["digest"] == hashlib.sha256(json.dumps(body, sort_keys=True).encode()
                                            ).hexdigest()


def test_without_yes_nothing_is_touched(loop_device: Callable[[int], str]) -> None:
    dev = loop_device(8)
    fill(dev)
    done = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "agent", "erase", dev],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--yes" in done.stderr
    assert PATTERN in read_all(dev)


def test_overwrite_path_without_discard(loop_device: Callable[[int], str]) -> None:
    dev = loop_device(16)
    fill(dev)
    method = erase.Method("overwrite", "Clear", "test")
    cert = erase.erase_device(dev, node="n1", method=method, samples=64)
    assert cert.passed and cert.method == "overwrite" and cert.node == "n1"
    assert read_all(dev).count(0) == 16 * 2**20


def test_verification_catches_data_left_behind(loop_device: Callable[[int], str]) -> None:
    """A method that claims success but leaves data: the certificate says FAILED."""
    dev = loop_device(8)
    fill(dev)
    offsets = erase.sample_offsets(8 * 2**20, 32, seed=1)
    before = erase._read_samples(dev, offsets)
    check = erase.verify(erase.inspect_device(dev), erase.Method("overwrite", "Clear", "t"),
                         before, offsets)
    assert not check.passed and check.failures
    crypto = erase.verify(erase.inspect_device(dev), erase.Method(
        "nvme-crypto-erase", "Purge", "t"), before, offsets)
    assert not crypto.passed  # content unchanged after a "crypto erase"


def test_sample_offsets_cover_first_and_last_block() -> None:
    offsets = erase.sample_offsets(10 * 2**20, 16, seed=7)
    assert offsets[0] == 0 and offsets[-1] == 10 * 2**20 - erase.SAMPLE
    assert all(o % erase.SAMPLE == 0 for o in offsets)


def fake_runner(ctrl: dict[str, int]) -> Callable[[Sequence[str]], str]:
    def run(cmd: Sequence[str]) -> str:
        if cmd[0] == "lsblk":
            return json.dumps({"blockdevices": [{
                "path": cmd[-1], "size": 3_840_755_982_336, "model": "SAMSUNG MZQL23T8HCLS",
                "serial": "S64HNE0T", "vendor": None, "tran": "nvme", "disc-max": 2199023255040,
                "type": "disk"}]})
        if cmd[:2] == ["nvme", "id-ctrl"]:
            return json.dumps(ctrl)
        if cmd[:2] == ["nvme", "version"]:
            return "nvme version 2.3 (git 2.3)\n"
        raise AssertionError(cmd)
    return run


@pytest.mark.parametrize(("ctrl", "method"), [
    ({"fna": 0x4, "sanicap": 0x3}, "nvme-crypto-erase"),
    ({"fna": 0x0, "sanicap": 0x0}, "nvme-user-data-erase"),
])
def test_nvme_method_choice(ctrl: dict[str, int], method: str) -> None:
    runner = fake_runner(ctrl)
    dev = erase.inspect_device("/dev/null", runner)  # exists; the runner answers for it
    chosen = erase.choose_method(dev, runner)
    assert chosen.name == method and chosen.nist_level == "Purge"
    assert chosen.tool == "nvme-cli nvme version 2.3 (git 2.3)"
    assert asdict(dev)["serial"] == "S64HNE0T"


def test_a_partition_or_missing_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(erase.EraseError, match="no such device"):
        erase.inspect_device(str(tmp_path / "nope"))

    def part(cmd: Sequence[str]) -> str:
        return json.dumps({"blockdevices": [{"path": cmd[-1], "size": 1, "type": "part"}]})

    with pytest.raises(erase.EraseError, match="not a whole disk"):
        erase.inspect_device("/dev/null", part)
