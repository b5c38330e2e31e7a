"""Phone home: trade the one-time token for a node credential, push a summary of the last
window at a fixed interval, and carry out the control plane's commands (configure, verify,
erase, backup, restore, and a swap's direct copy: send or receive), fetched over this
outbound connection. A control plane that is down is retried at
the next interval; telemetry at /metrics never depends on it."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from pydantic import TypeAdapter

from gpulease.agent.backup import run_transfer
from gpulease.agent.copy import fetch, serve
from gpulease.agent.erase import erase_device, tenant_disks
from gpulease.agent.gpu.checks import SuiteOptions, run_suite
from gpulease.agent.handover import authorized_keys, install_keys, set_root_password
from gpulease.agent.server import AgentState
from gpulease.ports.agent import (
    BackupCommand,
    Command,
    CommandOutcome,
    ConfigureCommand,
    ConfigurePayload,
    ConfigureResult,
    ErasePayload,
    EraseResult,
    ReceiveCommand,
    RestoreCommand,
    Result,
    SendCommand,
    TransferResult,
    VerifyCommand,
    VerifyPayload,
    VerifyResult,
)

log = logging.getLogger("gpulease.agent")
_COMMANDS: TypeAdapter[list[Command]] = TypeAdapter(list[Command])


def keys_missing(keys: list[str], authorized: Path) -> int:
    """How many of `keys` (type and base64, the comment aside) `authorized` lacks."""
    try:
        present = {tuple(line.split()[:2]) for line in authorized.read_text().splitlines()
                   if len(line.split()) >= 2}
    except OSError:
        present = set()
    return sum(1 for key in keys if tuple(key.split()[:2]) not in present)


def read_token(path: Path) -> str:
    """The token alone, or the config drive's /etc/gpulease/agent.env
    (GPULEASE_AGENT_TOKEN=...)."""
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("GPULEASE_AGENT_TOKEN="):
            return line.split("=", 1)[1].strip()
    return text.strip()


@dataclass(frozen=True)
class NodeOptions:
    """What this node's commands act on."""

    fio_target: str | None = None  # the data disk for the acceptance suite's fio checks
    erase_devices: tuple[str, ...] = ()  # empty: every disk but the one holding /
    allow_erase: bool = False  # only the cleaning ramdisk's agent erases
    burnin_s: float | None = None  # None: the offer's pass mark
    fio_runtime_s: float = 10.0  # per fio job
    data_root: Path = Path("/data")  # the data disk: what backups read and restores write
    copy_bind: str = "0.0.0.0"  # where a swap's source serves its copy (agent/copy.py)
    # the system the tenant's keys and password are written into at configure (a test's
    # agent: a scratch directory)
    system_root: Path = Path("/")


@dataclass(frozen=True)
class Keys:
    """Where the agent keeps its credential, and the enrollment token (the config drive's)
    it registers with when it has none."""

    credential_file: Path
    enroll_token_file: Path | None = None


@dataclass(frozen=True)
class Cadence:
    """How often the agent pushes its samples and asks for commands, and how long it waits
    for the control plane."""

    push_s: float = 60.0
    command_poll_s: float = 5.0
    timeout_s: float = 10.0


class PhoneHome:
    def __init__(self, url: str, state: AgentState, keys: Keys, *,
                 listen_port: int | None = None, cadence: Cadence = Cadence(),
                 options: NodeOptions = NodeOptions()) -> None:
        self.url = url.rstrip("/")
        self.state, self.interval_s = state, cadence.push_s
        self.command_poll_s, self.options = cadence.command_poll_s, options
        self.commands_done = 0
        self._register_lock = threading.Lock()
        self._spent_token: str | None = None  # the enrollment token this agent used last
        self.credential_file, self.enroll_token_file = keys.credential_file, keys.enroll_token_file
        self.listen_port = listen_port
        self.client = httpx.Client(timeout=cadence.timeout_s)
        self.pushes = 0
        self.last_alerts: list[dict[str, Any]] = []
        self._stop = threading.Event()

    def credential(self) -> str | None:
        if self.credential_file.exists():
            return self.credential_file.read_text().strip() or None
        return None

    def _credential_or_register(self) -> str:
        with self._register_lock:  # two threads, one enrollment
            return self.credential() or self.register()

    def register(self) -> str:
        if self.enroll_token_file is None or not self.enroll_token_file.exists():
            raise RuntimeError("no credential yet and no enrollment token file; pass "
                               "--enroll-token-file (the config drive's agent token)")
        token = read_token(self.enroll_token_file)
        if token == self._spent_token:
            raise RuntimeError("the control plane ended this agent's credential (the machine "
                               "was handed back or redeployed); waiting for a new enrollment "
                               "token in the config drive")
        address = f"{self.state.hostname}:{self.listen_port}" if self.listen_port else None
        resp = self.client.post(f"{self.url}/api/v1/agent/register", json={
            "token": token, "hostname": self.state.hostname, "address": address,
            "inventory": self.state.inventory()})
        if resp.status_code != 201:
            raise RuntimeError(f"enrollment refused ({resp.status_code}): "
                               f"{resp.json().get('detail', resp.text)}")
        credential: str = resp.json()["credential"]
        self._spent_token = token
        self.credential_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.credential_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(credential)
        return credential

    def _forget_if_refused(self, resp: httpx.Response, credential: str) -> None:
        """A 401: the control plane ended the credential (each delivery and each release
        does). Drop it, so that the next call enrolls with the token of the next config
        drive (the cleaning ramdisk's, or a new OS's)."""
        if resp.status_code != 401:
            return
        with self._register_lock:
            if self.credential() == credential:
                self.credential_file.unlink(missing_ok=True)

    def push(self) -> list[dict[str, Any]]:
        credential = self._credential_or_register()
        summary = self.state.summary(self.interval_s)
        resp = self.client.post(f"{self.url}/api/v1/agent/telemetry",
                                json={"gpus": summary["gpus"]},
                                headers={"Authorization": f"Bearer {credential}"})
        self._forget_if_refused(resp, credential)
        if resp.status_code != 202:
            raise RuntimeError(f"telemetry refused ({resp.status_code}): "
                               f"{resp.json().get('detail', resp.text)}")
        self.pushes += 1
        self.last_alerts = resp.json()["alerts"]
        return self.last_alerts

    # --- commands ------------------------------------------------------------------------
    def poll_commands(self) -> int:
        """Fetch and carry out pending commands; returns how many ran."""
        credential = self._credential_or_register()
        headers = {"Authorization": f"Bearer {credential}"}
        resp = self.client.get(f"{self.url}/api/v1/agent/commands", headers=headers)
        self._forget_if_refused(resp, credential)
        if resp.status_code != 200:
            raise RuntimeError(f"commands refused ({resp.status_code}): "
                               f"{resp.json().get('detail', resp.text)}")
        commands = _COMMANDS.validate_python(resp.json())
        for command in commands:
            self._execute(command, headers)
        return len(commands)

    def _execute(self, command: Command, headers: dict[str, str]) -> None:
        try:
            outcome = CommandOutcome(ok=True, result=self._carry_out(command, headers)
                                     .model_dump(mode="json"))
        except Exception as exc:  # reported to the control plane, which decides
            log.warning("command %s failed: %s", command.kind, exc)
            outcome = CommandOutcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:4000])
        for _ in range(5):  # the result must not be lost to one dropped connection
            try:
                resp = self.client.post(
                    f"{self.url}/api/v1/agent/commands/{command.id}/result",
                    content=outcome.model_dump_json(),
                    headers={**headers, "Content-Type": "application/json"})
                if resp.status_code < 500:
                    break
            except httpx.HTTPError as exc:
                log.warning("posting the result of %s: %s", command.id, exc)
            self._stop.wait(2)
        self.commands_done += 1

    def _carry_out(self, command: Command, headers: dict[str, str]) -> Result:
        if isinstance(command, ConfigureCommand):
            return self.configure(command.payload)
        if isinstance(command, VerifyCommand):
            return self.verify(command.payload)
        if isinstance(command, BackupCommand | RestoreCommand | SendCommand | ReceiveCommand):
            def report(moved: int, total: int) -> None:  # best effort, every few seconds
                self.client.post(f"{self.url}/api/v1/agent/commands/{command.id}/progress",
                                 json={"moved": moved, "total": total}, headers=headers)

            if isinstance(command, ReceiveCommand):  # a swap's direct copy, the spare's side
                return fetch(self.options.data_root, command.payload, report)
            if isinstance(command, SendCommand):  # and the faulty server's
                return serve(self.options.data_root, command.payload, report,
                             bind=(self.options.copy_bind, command.payload.port))
            result: TransferResult = run_transfer(self.options.data_root, command.payload,
                                                  report=report)
            return result
        return self.erase(command.payload)

    def _address(self) -> str:
        """The address this server reaches the control plane from (its routable IP)."""
        target = urlparse(self.url)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target.hostname or "127.0.0.1", target.port or 443))
            return str(s.getsockname()[0])

    def configure(self, payload: ConfigurePayload) -> ConfigureResult:
        """The node passed its acceptance: put the tenant's SSH keys and password in place
        (agent/handover.py); confirm cloud-init applied the config drive at first boot,
        without errors, and the keys are there; report the address."""
        root = self.options.system_root
        install_keys(root, payload.ssh_keys)
        if payload.root_password_hash:
            set_root_password(root, payload.root_password_hash)
        status = Path("/run/cloud-init/result.json")
        cloud_init = "not present (image without cloud-init)"
        missing = None
        if status.exists():
            result = json.loads(status.read_text()).get("v1", {})
            if result.get("errors"):
                raise RuntimeError(f"cloud-init reported errors: {result['errors']}")
            cloud_init = "done"
            missing = keys_missing(payload.ssh_keys, authorized_keys(root))
        return ConfigureResult(ip_address=self._address(), hostname=socket.gethostname(),
                               cloud_init=cloud_init, keys_missing=missing)

    def verify(self, payload: VerifyPayload) -> VerifyResult:
        report = run_suite(self.state.backend, payload.thresholds, payload.spec,
                           SuiteOptions(fio_target=self.options.fio_target,
                                        fio_runtime_s=self.options.fio_runtime_s,
                                        burnin_s=self.options.burnin_s))
        return VerifyResult.of(report)

    def erase(self, payload: ErasePayload) -> EraseResult:
        if not self.options.allow_erase:
            raise RuntimeError("this agent was started without --allow-erase: only the "
                               "cleaning ramdisk's agent erases disks")
        devices = list(self.options.erase_devices) or tenant_disks()
        return EraseResult(certificates=[
            erase_device(d, node=self.state.hostname, lease=payload.lease).as_dict()
            for d in devices])

    # --- loops ---------------------------------------------------------------------------
    def _loop(self, every: float, work: Any, what: str) -> None:
        while not self._stop.wait(every):
            try:
                work()
            except (httpx.HTTPError, RuntimeError, OSError, ValueError) as exc:
                log.warning("%s with %s failed: %s", what, self.url, exc)

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._loop, args=(self.interval_s, self.push, "push"),
                             name="phone-home", daemon=True),
            threading.Thread(target=self._loop, args=(self.command_poll_s,
                                                      self.poll_commands, "commands"),
                             name="agent-commands", daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in getattr(self, "_threads", []):
            t.join(timeout=5)
        self.client.close()
