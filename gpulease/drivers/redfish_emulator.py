"""Start sushy-tools' Redfish emulator (fake driver) on 127.0.0.1: a real Redfish peer for
tests, benches and the demo. Fresh state directory, htpasswd auth (bcrypt rounds=4)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


@dataclass
class Emulator:
    url: str
    systems: list[str]
    proc: subprocess.Popen[bytes]
    state_dir: Path
    username: str
    password: str

    def system_url(self, i: int = 0) -> str:
        return f"{self.url}/redfish/v1/Systems/{self.systems[i]}"

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.url}{path}", auth=(self.username, self.password), timeout=10)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


# The emulator with its fake driver's random power delay replaced by a fixed one.
_FIXED_DELAY = (
    "import sys, types\n"
    "from sushy_tools.emulator.resources.systems import fakedriver\n"
    "fakedriver.random = types.SimpleNamespace(randint=lambda low, high: {delay})\n"
    "from sushy_tools.emulator.main import main\n"
    "sys.argv[0] = 'sushy-emulator'\n"
    "sys.exit(main())\n")


def write_htpasswd(path: Path, username: str, password: str) -> None:
    """The emulator's one user (bcrypt, rounds=4: a test peer, not a vault)."""
    import bcrypt  # only needed here

    path.write_text(
        f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")


@dataclass(frozen=True)
class Rack:
    """The fake servers behind the emulator: how many, their power at the start, the NICs
    each lists (one each if not given), and a fixed delay for power changes."""

    count: int = 2
    power: str = "Off"
    nics: list[int] | None = None
    power_delay_s: int | None = None


def start_emulator(workdir: Path, port: int, rack: Rack = Rack(), username: str = "admin",
                   password: str = "admin") -> Emulator:
    """sushy-tools' emulator with its fake driver. Its power changes land after a random
    1–11 s, as slow BMCs do; `rack.power_delay_s` fixes that delay instead (tests of the
    flows around power, not of the waiting)."""
    count, power, nics, power_delay_s = rack.count, rack.power, rack.nics, rack.power_delay_s
    workdir.mkdir(parents=True, exist_ok=True)
    write_htpasswd(workdir / "htpasswd", username, password)
    systems = [f"5e1f0000-0000-4000-8000-{i:012d}" for i in range(1, count + 1)]
    nic_counts = nics or [1] * count

    def nic_list(i: int) -> str:
        return ", ".join(
            f"{{'mac': '00:5c:52:{n:02x}:{i // 256:02x}:{i % 256:02x}', 'ip': '172.22.{n}.{i}'}}"
            for n in range(1, nic_counts[i - 1] + 1))

    fake = ",\n".join(
        f"{{'uuid': '{u}', 'name': 'gpu-node-{i:02d}', 'power_state': '{power}', "
        f"'external_notifier': False, 'nics': [{nic_list(i)}]}}"
        for i, u in enumerate(systems, start=1))
    (workdir / "emulator.conf").write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(workdir / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(workdir / 'htpasswd')!r}\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = [\n{fake}\n]\n")
    log = (workdir / "emulator.log").open("w")
    command = [str(Path(sys.executable).parent / "sushy-emulator")]
    if power_delay_s is not None:
        command = [sys.executable, "-c", _FIXED_DELAY.format(delay=int(power_delay_s))]
    proc = subprocess.Popen(command + ["--fake", "--config", str(workdir / "emulator.conf")],
                            stdout=subprocess.DEVNULL, stderr=log)
    emu = Emulator(f"http://127.0.0.1:{port}", systems, proc, workdir / "state", username,
                   password)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            emu.get("/redfish/v1/Systems")
            return emu
        except httpx.HTTPError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    emu.stop()
    raise RuntimeError("sushy-emulator did not start: " + (workdir / "emulator.log").read_text())
