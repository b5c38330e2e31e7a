"""`up` owns its data dir and its helpers: a second `up` on one data dir is one line; a
read-only or full data dir is one line; helpers left by an `up` that died are ended by the
next (only while their command line still names the data dir), and a helper dies with the
process that started it; `/healthz` says when the database's disk cannot take writes. The
read-only and full cases mount a file system of their own (root only)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.compose import make_platform
from gpulease.data_dir import DataDirBusy, DataDirUnusable, end_stale_children, hold
from gpulease.testing.platforms import make_settings


def _gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:  # bounded
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            return True
        if state == "Z":  # ended, not yet reaped by its parent
            return True
        time.sleep(0.1)
    return False


def test_one_up_at_a_time_on_a_data_dir(tmp_path: Path) -> None:
    first = hold(tmp_path / "data")
    try:
        with pytest.raises(DataDirBusy, match=rf"pid {os.getpid()}.*another --data-dir"):
            hold(tmp_path / "data")
    finally:
        first.release()
    hold(tmp_path / "data").release()  # free again


def test_a_second_up_is_refused_in_one_line(tmp_path: Path) -> None:
    held = hold(tmp_path / "data")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpulease.cli.main", "up", "--data-dir",
             str(tmp_path / "data"), "--bmc", "simulated", "--port", "1"],
            capture_output=True, text=True, timeout=120,
            env=os.environ | {"COLUMNS": "300"})
    finally:
        held.release()
    assert done.returncode == 1
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "another `gpulease up`" in said[0], done.stderr


def test_helpers_left_by_a_dead_up_are_ended_and_others_left_alone(tmp_path: Path) -> None:
    data = (tmp_path / "data").resolve()
    held = hold(data)
    wait = [sys.executable, "-c", "import time; time.sleep(300)"]
    ours = subprocess.Popen([*wait, str(data)])  # a helper naming the data dir
    stranger = subprocess.Popen(wait)  # a pid reused by something else
    try:
        held.record_child(ours.pid, "SeaweedFS")
        held.record_child(stranger.pid, "docker-registry")
        held.lock.close()  # the `up` dies without releasing: its lock goes with it
        cmdline = Path(f"/proc/{ours.pid}/cmdline")
        for _ in range(100):  # bounded: the helper is up and names the data dir
            if str(data) in cmdline.read_bytes().decode(errors="replace"):
                break
            time.sleep(0.1)
        assert ours.poll() is None, "the helper ended by itself"
        assert sorted(end_stale_children(data)) == [ours.pid]
        assert _gone(ours.pid) and stranger.poll() is None
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()


def test_a_helper_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = ("import subprocess, sys, time\n"
              "from gpulease.data_dir import die_with_parent\n"
              "child = subprocess.Popen(['sleep', '300'], preexec_fn=die_with_parent,"
              " start_new_session=True)\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert not _gone(child, within_s=0.5)
        parent.send_signal(signal.SIGKILL)  # `up` killed: no finally runs
        parent.wait(10)
        assert _gone(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def _fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system under `folder`, leaving about `leave` bytes."""
    with (folder / "filler").open("ab") as f:
        while True:  # bounded: the file system's size
            found = os.statvfs(folder)
            free = found.f_bavail * found.f_frsize - leave
            if free <= 0:
                return
            try:
                f.write(b"\0" * min(free, 2**20))
                f.flush()
            except OSError:
                return


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of the test's own (root only)."""
    where = tmp_path / "fs"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_or_read_only_data_dir_is_one_line(small_fs: Path) -> None:
    _fill(small_fs)
    with pytest.raises(DataDirUnusable, match="its disk is full"):
        hold(small_fs / "data")
    (small_fs / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with pytest.raises(DataDirUnusable, match="read-only file system"):
        hold(small_fs / "data")


def test_healthz_says_when_the_database_disk_is_full(small_fs: Path) -> None:
    url = f"sqlite:///{small_fs / 'h.db'}"
    p = make_platform(make_settings(url, small_fs / "data"))
    p.db.migrate()
    try:
        with TestClient(create_app(p)) as client:
            ok = client.get("/healthz")
            assert ok.status_code == 200 and ok.json()["writable"] is True
            _fill(small_fs, leave=2**20)  # 1 MiB left: SQLite's next pages would not fit
            full = client.get("/healthz")
            assert full.status_code == 503 and full.json()["writable"] is False
            assert "full" in full.json()["reason"]
    finally:
        p.close()
