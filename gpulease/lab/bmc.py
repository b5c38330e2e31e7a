"""The lab's BMC: sushy-tools' Redfish emulator with its libvirt driver, on 127.0.0.1, for
the lab's domains only (SUSHY_EMULATOR_ALLOWED_INSTANCES) and with the lab's pool for
virtual media. It runs apart from the command that starts it (a session of its own), so
the lab outlives `gpulease lab up`; `stop` ends it by its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpulease.drivers.redfish_emulator import write_htpasswd
from gpulease.lab.machines import LIBVIRT_URI, pool_name


def start(folder: Path, lab: str, port: int, uuids: list[str],
          login: tuple[str, str]) -> int:
    """Starts the emulator and waits until it answers; returns its pid."""
    username, password = login
    folder.mkdir(parents=True, exist_ok=True)
    write_htpasswd(folder / "htpasswd", username, password)
    (folder / "emulator.conf").write_text(
        f"SUSHY_EMULATOR_LIBVIRT_URI = {LIBVIRT_URI!r}\n"
        f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {uuids!r}\n"
        f"SUSHY_EMULATOR_STORAGE_POOL = {pool_name(lab)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(folder / 'emulator-state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(folder / 'htpasswd')!r}\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n")
    log = (folder / "emulator.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "sushy-emulator"), "--config",
         str(folder / "emulator.conf")],
        stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/redfish/v1/Systems", auth=login, timeout=5)
            if r.status_code == 200 and len(r.json().get("Members", [])) == len(uuids):
                return proc.pid
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop(proc.pid)
    raise RuntimeError("the lab's Redfish emulator did not start: "
                       + (folder / "emulator.log").read_text()[-2000:])


def stop(pid: int | None) -> None:
    """Ends the emulator (if it is still the lab's: a sushy-emulator process)."""
    if not pid:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if b"sushy-emulator" not in cmdline:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            return
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
