"""Simulated servers for the demo fleet and for fault injection.

Each simulated server keeps its state in a small JSON file, like a real BMC keeps its own:
a worker killed mid-deploy finds the server as it left it. Power changes land after
`delay_s`; an agent phones home `delay_s` after a boot from inserted media. Faults are
injected per operation (transient, permanent or hang) for a number of calls.
Everything this module reports is labelled simulated.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from gpulease.agent.erase import simulated_certificates
from gpulease.agent.gpu.checks import simulated_node_report
from gpulease.agent.gpu.simulated import parse_faults
from gpulease.domain.fleet.acceptance import GpuSpec, Report, Thresholds
from gpulease.domain.fleet.bmc_events import LogEntry
from gpulease.drivers.simulated_copy import copy_step
from gpulease.ports.agent import (
    AgentError,
    ConfigureResult,
    EraseResult,
    NodeConfig,
    NodeRef,
    Pending,
    SendPayload,
    TransferPayload,
    TransferResult,
)
from gpulease.ports.bmc import (
    BmcEndpoint,
    BmcLog,
    BmcPermanentError,
    BmcTransientError,
    BootDevice,
    MediaSlot,
    PowerState,
)
from gpulease.ports.runtime import (
    ContainerHandle,
    ContainerSpec,
    RuntimeError_,
    SavedImageResult,
)
from gpulease.process_metrics import bmc_error

FAULT_KINDS = ("transient", "permanent", "hang", "ignored")  # ignored: accepted, not done
DISK = "disk"  # what a stand-in agent records of a boot from the server's own disk


def simulated_ip(node_name: str) -> str:
    """A stable, distinct private address per simulated node."""
    a, b, c = hashlib.sha256(node_name.encode()).digest()[:3]
    return f"10.{a}.{b}.{c % 250 + 2}"


class SimulatedFleet:
    def __init__(
        self, state_dir: Path, delay_s: float = 0.0, now: Callable[[], float] = time.time,
        latency_s: float = 0.0,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.delay_s = delay_s
        self.latency_s = latency_s
        self._now = now

    # -- state files -------------------------------------------------------------
    def _path(self, node: str) -> Path:
        return self.state_dir / f"{node}.json"

    @contextmanager
    def _state(self, node: str) -> Iterator[dict[str, Any]]:
        if self.latency_s:
            time.sleep(self.latency_s)
        path = self._path(node)
        with open(self.state_dir / f"{node}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
                "power": "off", "power_target": "off", "power_lands_at": 0.0,
                "boot_override": None, "media": None, "booted_media": None,
                "booted_at": 0.0, "faults": {}, "erase_count": 0, "config": None,
                "containers": {},
            }
            self._land_power(state)
            try:
                yield state
            finally:  # a call that raised (an injected fault) still used up the fault
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state))
                tmp.replace(path)

    def _land_power(self, state: dict[str, Any]) -> None:
        if state["power"] != state["power_target"] and self._now() >= state["power_lands_at"]:
            state["power"] = state["power_target"]
            if state["power"] == "on":
                boot_cd = state["boot_override"] == BootDevice.VIRTUAL_CD.value
                state["booted_media"] = state["media"] if boot_cd else None
                if state["boot_override"] == BootDevice.DISK.value:
                    state["booted_media"] = "disk"  # the system an image deploy wrote
                state["booted_at"] = state["power_lands_at"]
                state["boot_override"] = None  # one-time override is consumed by the boot
            else:
                state["booted_media"] = None

    def _fault(self, state: dict[str, Any], op: str) -> str | None:
        fault = state["faults"].get(op)
        if not fault:
            return None
        fault["remaining"] -= 1
        if fault["remaining"] <= 0:
            del state["faults"][op]
        return str(fault["kind"])

    def _raise_bmc_fault(self, state: dict[str, Any], op: str) -> None:
        kind = self._fault(state, op)
        if kind in ("transient", "permanent"):
            bmc_error("simulated", "server_error" if kind == "transient" else "auth")
        if kind == "transient":
            raise BmcTransientError(f"simulated BMC: 503 Service Unavailable during {op}")
        if kind == "permanent":
            raise BmcPermanentError(f"simulated BMC: 401 Unauthorized during {op}")

    # -- operator / test controls -----------------------------------------------
    def inject_fault(self, node: str, op: str, kind: str, times: int = 1) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}")
        with self._state(node) as state:
            state["faults"][op] = {"kind": kind, "remaining": times}

    def clear_faults(self, node: str) -> None:
        """The injected faults of a node's BMC and agent are gone (the cause was fixed)."""
        with self._state(node) as state:
            state["faults"].clear()

    def add_bmc_log(self, node: str, severity: str, message: str, created: str,
                    sensor: str | None = None) -> None:
        """An entry in the simulated BMC's SEL (as a real one logs a fault)."""
        with self._state(node) as state:
            log = state.setdefault("bmc_log", [])
            log.append({"service": "sel", "id": str(len(log) + 1), "created": created,
                        "severity": severity, "message": message, "sensor": sensor})
            if severity == "Critical":
                state["health"] = "Critical"

    def offer_event_service(self, node: str, offered: bool = True) -> None:
        """The node's BMC offers (or stops offering) an event service to subscribe to;
        `offered=False` also drops a subscription it holds."""
        with self._state(node) as state:
            state["event_service"] = offered
            if not offered:
                state["subscription"] = None

    def set_bmc_health(self, node: str, health: str) -> None:
        with self._state(node) as state:
            state["health"] = health

    def data_disk(self, node: str) -> Path:
        """The simulated server's data disk, mounted at /data: a directory of the state
        (backups read it, restores write it, an erase empties it)."""
        return self.state_dir / "disks" / node

    def set_gpu_faults(self, node: str, faults: list[str]) -> None:
        """GPU faults (agent/gpu/simulated.py's KIND[:GPU[:ARG]]) the node's acceptance sees."""
        parse_faults(faults)  # refuse a typo now, not at the next delivery
        with self._state(node) as state:
            state["gpu_faults"] = list(faults)

    def snapshot(self, node: str) -> dict[str, Any]:
        with self._state(node) as state:
            return dict(state)

    def bmc(self, endpoint: BmcEndpoint) -> SimulatedBmc:
        return SimulatedBmc(self, endpoint.node_name)

    # -- used by the drivers ------------------------------------------------------
    def request_power(self, node: str, target: str, op: str) -> None:
        with self._state(node) as state:
            _count(state, op)
            if state["faults"].get(op, {}).get("kind") == "ignored":
                self._fault(state, op)  # a BMC that answers 204 and does nothing
                state["ignored_requests"] = state.get("ignored_requests", 0) + 1
                return
            self._raise_bmc_fault(state, op)
            if state["power_target"] != target:
                state["power_target"] = target
                state["power_lands_at"] = self._now() + self.delay_s
                self._land_power(state)


def _count(state: dict[str, Any], op: str) -> None:
    """Every request that reached the BMC, by operation (what a fence test reads)."""
    requests = state.setdefault("requests", {})
    requests[op] = requests.get(op, 0) + 1


class SimulatedBmc:
    simulated = True

    def __init__(self, fleet: SimulatedFleet, node: str) -> None:
        self._fleet, self._node = fleet, node

    def power_state(self) -> PowerState:
        with self._fleet._state(self._node) as state:
            state["power_reads"] = state.get("power_reads", 0) + 1  # the polling load
            self._fleet._raise_bmc_fault(state, "power_state")
            return PowerState(state["power"])

    def power_on(self) -> None:
        self._fleet.request_power(self._node, "on", "power_on")

    def power_off(self) -> None:
        self._fleet.request_power(self._node, "off", "power_off")

    def force_restart(self) -> None:
        self._restart("force_restart")

    def graceful_restart(self) -> None:
        self._restart("graceful_restart")

    def _restart(self, op: str) -> None:
        with self._fleet._state(self._node) as state:
            _count(state, op)
            self._fleet._raise_bmc_fault(state, op)
            state["power"] = "off"
            state["power_target"] = "on"
            state["power_lands_at"] = self._fleet._now() + self._fleet.delay_s
            self._fleet._land_power(state)

    def set_one_time_boot(self, device: BootDevice, http_boot_uri: str | None = None) -> None:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "set_one_time_boot")
            state["boot_override"] = device.value
            state["http_boot_uri"] = http_boot_uri

    def event_log(self, seen: Mapping[str, str] | None = None) -> BmcLog:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "event_log")
            entries = tuple(LogEntry(**e) for e in state.get("bmc_log", []))
            return BmcLog(state.get("health", "OK"), ("sel",), entries)

    def subscribe_events(self, destination: str, context: str) -> str | None:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "subscribe_events")
            if not state.get("event_service"):
                return None
            uri = f"/redfish/v1/EventService/Subscriptions/{self._node}"
            state["subscription"] = {"uri": uri, "destination": destination,
                                     "context": context}
            return uri

    def subscription_alive(self, uri: str) -> bool:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "subscription_alive")
            held = state.get("subscription") or {}
            return bool(held.get("uri") == uri)

    def clear_boot_override(self) -> None:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "clear_boot_override")
            state["boot_override"] = None
            state["http_boot_uri"] = None

    def insert_media(self, image_url: str, slot: MediaSlot = MediaSlot.CD) -> None:
        with self._fleet._state(self._node) as state:
            _count(state, "insert_media")
            kind = self._fleet._fault(state, "insert_media")
            if kind == "permanent":
                raise BmcPermanentError(f"simulated BMC: image {image_url} answered 404")
            if kind == "transient":
                raise BmcTransientError("simulated BMC: 500 during InsertMedia")
            state["media" if slot == MediaSlot.CD else "usb"] = image_url

    def eject_media(self) -> None:
        with self._fleet._state(self._node) as state:
            self._fleet._raise_bmc_fault(state, "eject_media")
            state["media"] = None
            state["usb"] = None

    def inserted_media(self, slot: MediaSlot = MediaSlot.CD) -> str | None:
        with self._fleet._state(self._node) as state:
            media: str | None = state.get("media" if slot == MediaSlot.CD else "usb")
            return media


class SimulatedAgent:
    simulated = True
    enrolls_from_config_drive = False

    def __init__(self, fleet: SimulatedFleet) -> None:
        self._fleet = fleet

    def is_up(self, node: NodeRef) -> bool:
        with self._fleet._state(node.name) as state:
            if state["faults"].get("agent_up", {}).get("kind") == "hang":
                return False
            return bool(
                state["power"] == "on"
                and state["booted_media"]
                and self._fleet._now() >= state["booted_at"] + self._fleet.delay_s
            )

    def _check(self, state: dict[str, Any], op: str) -> None:
        kind = self._fleet._fault(state, op)
        if kind == "transient":
            raise AgentError(f"simulated agent: {op} interrupted, connection reset")
        if kind == "permanent":
            err = AgentError(f"simulated agent: {op} failed: device error")
            err.retryable = False
            raise err
        if not (state["power"] == "on" and state["booted_media"]):
            raise AgentError(f"simulated agent on {state.get('name', 'node')} is not running")

    def configure(self, node: NodeRef, config: NodeConfig) -> ConfigureResult:
        with self._fleet._state(node.name) as state:
            self._check(state, "agent_configure")
            state["config"] = {"hostname": config.hostname, "keys": len(config.ssh_keys)}
            return ConfigureResult(ip_address=simulated_ip(node.name))

    def erase(self, node: NodeRef, lease: str | None = None) -> EraseResult:
        with self._fleet._state(node.name) as state:
            self._check(state, "agent_erase")
            state["erase_count"] += 1
            state["config"] = None
        shutil.rmtree(self._fleet.data_disk(node.name), ignore_errors=True)
        return _simulated_erase(node.name, lease)

    def verify(self, node: NodeRef, thresholds: Thresholds, spec: GpuSpec) -> Report:
        with self._fleet._state(node.name) as state:
            self._check(state, "agent_verify")
            faults = list(state.get("gpu_faults", []))
        return simulated_node_report(node.name, faults, thresholds, spec)

    def transfer(self, node: NodeRef, payload: TransferPayload,
                 progress: Callable[[int, int], None] | None = None
                 ) -> TransferResult | Pending:
        """The real backup engine against the real S3 server (or the real direct copy, to
        another stand-in server), on the simulated server's data disk (a directory under
        the fleet's state)."""
        with self._fleet._state(node.name) as state:
            self._check(state, "agent_transfer")
        return _transfer(self._fleet.data_disk(node.name), node, payload, progress)


class SimulatedRuntime:
    simulated = True

    def __init__(self, fleet: SimulatedFleet) -> None:
        self._fleet = fleet

    def start(self, spec: ContainerSpec) -> ContainerHandle:
        with self._fleet._state(spec.node_name) as state:
            kind = self._fleet._fault(state, "runtime_start")
            if kind:
                err = RuntimeError_(f"simulated runtime: start failed ({kind})")
                err.retryable = kind == "transient"
                raise err
            entry = state["containers"].setdefault(
                spec.instance_id,
                {"gpus": list(spec.gpu_indices), "port": 20000 + len(state["containers"])},
            )
            return ContainerHandle(
                container_id=f"sim-{spec.instance_id}",
                ip_address="127.0.0.1",
                ssh_port=int(entry["port"]),
            )

    def stop(self, instance_id: str, node_name: str, engine_url: str | None = None) -> None:
        with self._fleet._state(node_name) as state:
            state["containers"].pop(instance_id, None)

    def restart(self, instance_id: str, node_name: str, engine_url: str | None = None
                ) -> ContainerHandle:
        with self._fleet._state(node_name) as state:
            kind = self._fleet._fault(state, "runtime_restart")
            entry = state["containers"].get(instance_id)
            if kind or entry is None:
                err = RuntimeError_(f"simulated runtime: restart failed ({kind or 'no container'})")
                err.retryable = kind == "transient"
                raise err
            entry["restarts"] = int(entry.get("restarts", 0)) + 1
            return ContainerHandle(container_id=f"sim-{instance_id}", ip_address="127.0.0.1",
                                   ssh_port=int(entry["port"]))

    def save(self, instance_id: str, node_name: str, engine_url: str | None,
             reference: str) -> SavedImageResult:
        """The demo's containers are records: the image is one too (no registry)."""
        with self._fleet._state(node_name) as state:
            kind = self._fleet._fault(state, "runtime_save")
            if kind or instance_id not in state["containers"]:
                err = RuntimeError_(f"simulated runtime: save failed ({kind or 'no container'})")
                err.retryable = kind == "transient"
                raise err
        digest = "sha256:" + hashlib.sha256(reference.encode()).hexdigest()
        return SavedImageResult(reference, digest, 0)


class BmcWatchingAgent:
    """A simulated node agent for servers behind a real BMC (the demo behind Redfish
    emulators, and tests), until the real agent runs on them. It reads the server's state
    from its BMC: the agent is up `boot_delay_s` after the BMC first shows the server on
    with virtual media inserted, and down once it shows it off. Its reports say simulated.
    """

    simulated = True
    enrolls_from_config_drive = False

    def __init__(self, bmc_for: Callable[[BmcEndpoint], Any], boot_delay_s: float = 0.0,
                 now: Callable[[], float] = time.time,
                 boot_server: Callable[[], str] | None = None,
                 disks_dir: Path | None = None) -> None:
        self._bmc_for = bmc_for
        self.disks_dir = disks_dir  # the servers' data disks, a directory each
        self.boot_delay_s = boot_delay_s
        self._now = now
        # A server on with no media inserted asks the boot server for its iPXE script, as
        # a PXE-booting server does (the control plane's /media/ipxe).
        self._boot_server = boot_server
        self._macs: dict[str, tuple[str, ...]] = {}
        self._booted: dict[str, tuple[str, float]] = {}
        self.boots: dict[str, list[str]] = {}  # every boot seen per node: the media URL
        # (or DISK: its own installed system)
        self.config_drives: dict[str, list[str | None]] = {}  # the config drive at each boot
        self.erased: dict[str, int] = {}
        self.gpu_faults: dict[str, list[str]] = {}  # injected GPU faults per node
        self.seeds: dict[str, list[str]] = {}  # NoCloud meta-data read at network boots
        self._mutex = threading.Lock()

    def is_up(self, node: NodeRef) -> bool:
        bmc = self._bmc_for(node.endpoint)
        if bmc.power_state() != PowerState.ON:
            with self._mutex:
                self._booted.pop(node.name, None)
            return False
        with self._mutex:
            booted = self._booted.get(node.name)
        media = bmc.inserted_media()
        if not media:  # booted from the network, or from its disk (the script says which):
            # a server powered on with neither boots its installed system (a card repair's
            # return); one still running since an earlier boot keeps that boot
            media = self._network_boot(node, bmc) or (booted[0] if booted else DISK)
        # Other media than the last boot's means the server was rebooted from it (the
        # engine may power-cycle it without this agent seeing the off state).
        if media and (booted is None or booted[0] != media):
            drive = bmc.inserted_media(MediaSlot.USB)
            with self._mutex:
                self._booted[node.name] = booted = (media, self._now())
                self.boots.setdefault(node.name, []).append(media)
                self.config_drives.setdefault(node.name, []).append(drive)
        if booted is None:
            return False
        return self._now() >= booted[1] + self.boot_delay_s

    def _network_boot(self, node: NodeRef, bmc: Any) -> str | None:
        """The kernel a PXE boot would load now (None: the script says boot from disk)."""
        if self._boot_server is None:
            return None
        macs = self._macs.get(node.name)
        if macs is None:
            macs = self._macs[node.name] = tuple(bmc.inventory().nic_macs or ())
        for mac in macs:
            try:
                script = httpx.get(f"{self._boot_server().rstrip('/')}/media/ipxe",
                                   params={"mac": mac}, timeout=5).text
            except httpx.HTTPError:
                return None
            kernel = next((line for line in script.splitlines()
                           if line.startswith("kernel ")), None)
            if kernel:
                # the installer reads its cloud-init seed over HTTP, as cloud-init would
                seed = next((w.split(";s=", 1)[1] for w in kernel.split()
                             if w.startswith("ds=nocloud-net;s=")), None)
                if seed:
                    meta = httpx.get(f"{seed}meta-data", timeout=5)
                    with self._mutex:
                        self.seeds.setdefault(node.name, []).append(
                            meta.text if meta.status_code == 200 else "")
                return kernel.split()[1]
        return None

    def _require_up(self, node: NodeRef, op: str) -> None:
        if not self.is_up(node):
            raise AgentError(f"simulated agent on {node.name} is not running ({op})")

    def configure(self, node: NodeRef, config: NodeConfig) -> ConfigureResult:
        self._require_up(node, "configure")
        return ConfigureResult(ip_address=simulated_ip(node.name))

    def erase(self, node: NodeRef, lease: str | None = None) -> EraseResult:
        self._require_up(node, "erase")
        with self._mutex:
            self.erased[node.name] = self.erased.get(node.name, 0) + 1
        return _simulated_erase(node.name, lease)

    def verify(self, node: NodeRef, thresholds: Thresholds, spec: GpuSpec) -> Report:
        self._require_up(node, "verify")
        return simulated_node_report(node.name, self.gpu_faults.get(node.name, []),
                                     thresholds, spec)

    def transfer(self, node: NodeRef, payload: TransferPayload,
                 progress: Callable[[int, int], None] | None = None
                 ) -> TransferResult | Pending:
        self._require_up(node, "transfer")
        if self.disks_dir is None:
            err = AgentError("this stand-in agent keeps no data disk to back up")
            err.retryable = False
            raise err
        return _transfer(self.disks_dir / node.name, node, payload, progress)


def _transfer(disk: Path, node: NodeRef, payload: TransferPayload,
              progress: Callable[[int, int], None] | None) -> TransferResult | Pending:
    from gpulease.agent.backup import BackupError, run_transfer

    if isinstance(payload, SendPayload):  # a receive is a send too
        return copy_step(disk, node, payload, progress)
    try:
        result: TransferResult = run_transfer(disk, payload, simulated=True, report=progress)
    except (BackupError, ValueError, OSError) as exc:
        err = AgentError(str(exc))
        err.retryable = isinstance(exc, OSError)
        raise err from None
    return result


def _simulated_erase(node: str, lease: str | None) -> EraseResult:
    certs = simulated_certificates(node, lease)
    return EraseResult(method="simulated", simulated=True,
                       certificates=[c.as_dict() for c in certs])
