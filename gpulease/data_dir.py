"""The data dir as `gpulease up` holds it: one `up` at a time (an exclusive lock on
`up.lock`, which the kernel lets go when the process dies, SIGKILL included), a dir that can
be written (read-only, not writable or full is one line that says so), and the helpers it
starts (SeaweedFS, docker-registry) ending with it: each dies with the process that started
it (Linux's parent-death signal), and any left from an `up` that could not see to it are
ended by the next `up` (their pids in `children.json`, checked against their command line
before a signal is sent)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOCK = "up.lock"
CHILDREN = "children.json"
PR_SET_PDEATHSIG = 1


class DataDirBusy(RuntimeError):
    """Another `gpulease up` holds this data dir."""


class DataDirUnusable(RuntimeError):
    """The data dir cannot be made or written (read-only, not writable, full)."""


def _said(path: Path, exc: OSError) -> str:
    why = {errno.EROFS: "it is on a read-only file system",
           errno.EACCES: "this user may not write there",
           errno.EPERM: "this user may not write there",
           errno.ENOSPC: "its disk is full",
           errno.EDQUOT: "its disk quota is used up"}.get(exc.errno or 0, exc.strerror)
    return (f"the data dir {path} cannot be written: {why}; free it, fix its permissions, "
            "or give another --data-dir")


@dataclass
class DataDirHold:
    path: Path
    lock: IO[str]

    def record_child(self, pid: int, what: str) -> None:
        """A helper this `up` started: ended by the next `up` if it outlives this one."""
        listed = _children(self.path)
        listed.append({"pid": pid, "what": what})
        (self.path / CHILDREN).write_text(json.dumps(listed))

    def release(self) -> None:
        (self.path / CHILDREN).unlink(missing_ok=True)
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.lock.close()


def hold(path: Path) -> DataDirHold:
    """The data dir, made if need be, written to once (a probe), locked for this process;
    helpers left by an `up` that died are ended first."""
    path = path.resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        with probe.open("wb") as f:  # a page, not a byte: a full disk refuses it
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
        lock = (path / LOCK).open("a+")
    except OSError as exc:
        raise DataDirUnusable(_said(path, exc)) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise DataDirBusy(f"another `gpulease up` (pid {holder}) is using the data dir "
                          f"{path}: stop it first, or give another --data-dir") from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    end_stale_children(path)
    return DataDirHold(path, lock)


def _children(path: Path) -> list[dict[str, object]]:
    try:
        found = json.loads((path / CHILDREN).read_text())
    except (OSError, ValueError):
        return []
    return [c for c in found if isinstance(c, dict) and isinstance(c.get("pid"), int)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def end_stale_children(path: Path, wait_s: float = 5.0) -> list[int]:
    """Helpers of an earlier `up` on this data dir still running: SIGTERM, then SIGKILL.
    A pid is signalled only while its command line names this data dir (a pid reused by
    another program is left alone). Returns the pids ended."""
    ended = []
    for child in _children(path):
        pid = int(str(child["pid"]))
        if str(path) not in _cmdline(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while str(path) in _cmdline(pid) and time.monotonic() < deadline:  # bounded
            time.sleep(0.1)
        if str(path) in _cmdline(pid):
            os.kill(pid, signal.SIGKILL)
        ended.append(pid)
    (path / CHILDREN).unlink(missing_ok=True)
    return ended


def die_with_parent() -> None:
    """For subprocess's preexec_fn: the child gets SIGTERM when the process that started it
    dies (Linux; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
