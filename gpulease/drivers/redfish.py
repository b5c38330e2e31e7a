"""The BMC port over Redfish, built on sushy (Dell iDRAC, HPE iLO, Supermicro, Inspur,
Huawei iBMC and the sushy-tools emulator all speak it).

Vendor values are translated through lookup tables; a resource the BMC does not offer is
reported as unknown (None), never as an error. sushy's own retries are off: the
provisioning engine retries with backoff and jitter and decides when to give up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
import sushy
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector
from sushy import exceptions as sx

from gpulease.domain.fleet.bmc_events import LogEntry
from gpulease.drivers import redfish_hardware as hw
from gpulease.drivers import redfish_media
from gpulease.drivers.on_behalf import Fenced, guard_session, user_agent
from gpulease.drivers.redfish_hardware import Drive, Fan, GpuDevice, PcieDevice, Temperature
from gpulease.ports.bmc import (
    BmcEndpoint,
    BmcError,
    BmcLog,
    BmcPermanentError,
    BmcTransientError,
    BootDevice,
    MediaSlot,
    PowerState,
)
from gpulease.process_metrics import bmc_error, bmc_wait

# Redfish power states, as sushy reports them, to what the engine waits for. A state in
# transition counts as the one it is leaving, so the engine keeps polling.
POWER_STATES: dict[Any, PowerState] = {
    sushy.PowerState.ON: PowerState.ON,
    sushy.PowerState.OFF: PowerState.OFF,
    sushy.PowerState.POWERING_ON: PowerState.OFF,
    sushy.PowerState.POWERING_OFF: PowerState.ON,
}

BOOT_SOURCES: dict[BootDevice, Any] = {
    BootDevice.VIRTUAL_CD: sushy.BootSource.CD,
    BootDevice.PXE: sushy.BootSource.PXE,
    BootDevice.UEFI_HTTP: sushy.BootSource.UEFI_HTTP,
    BootDevice.DISK: sushy.BootSource.HDD,
}

T = TypeVar("T")


@dataclass(frozen=True)
class Inventory:
    """What the BMC says about the server; None where it does not say."""

    system_id: str
    manufacturer: str | None
    model: str | None
    serial: str | None
    memory_gib: float | None
    processor_count: int | None  # CPU sockets
    processor_model: str | None
    drives: tuple[Drive, ...] | None
    nic_macs: tuple[str, ...] | None  # physical ports, each once
    gpus: tuple[GpuDevice, ...] | None = None
    pcie_devices: tuple[PcieDevice, ...] | None = None
    temperatures: tuple[Temperature, ...] | None = None
    fans: tuple[Fan, ...] | None = None
    unknown: tuple[str, ...] = field(default=())
    uuid: str | None = None  # the system's UUID: with the serial, the server's identity
    cpu_cores: int | None = None
    cpu_threads: int | None = None
    virtual_media: tuple[str, ...] | None = None  # the slots' media types (CD, USBStick…)
    media_one_slot: bool | None = None  # one drive takes both the image and the config drive
    media_protocols: tuple[str, ...] | None = None  # what InsertMedia fetches over, if named
    boot_targets: tuple[str, ...] | None = None  # BootSourceOverrideTarget allowed values
    warnings: tuple[str, ...] = field(default=())  # read in part: what could not be
    power: str | None = None  # the PowerState as read ("On", "Off", "PoweringOn"…)


def split_address(address: str) -> tuple[str, str | None]:
    """'http://bmc:8000/redfish/v1/Systems/abc' -> ('http://bmc:8000/redfish/v1', path)."""
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BmcPermanentError(
            f"BMC address {address!r} is not an http(s) URL; give e.g. "
            "https://10.0.0.5/redfish/v1/Systems/1"
        )
    root = f"{parts.scheme}://{parts.netloc}/redfish/v1"
    path = parts.path.rstrip("/")
    return root, (path if "/Systems/" in path else None)


def _connection_hint(message: str, address: str) -> BmcError | None:
    """What a failed connection means, when its cause says so: each its own answer with
    what to do; a configuration error is permanent, a BMC that may come back transient."""
    text = message.lower()
    if "wrong_version_number" in text or "wrong version number" in text:
        return BmcPermanentError(
            f"BMC at {address}: https:// to a port that answers plain HTTP (the TLS handshake "
            "failed); use http:// for this port, or the BMC's HTTPS port")
    if "certificate verify failed" in text or "certificate_verify_failed" in text:
        return BmcPermanentError(
            f"BMC at {address}: its TLS certificate is not trusted; install its CA on this "
            "host, or for a lab set GPULEASE_BMC_VERIFY_TLS=false")
    if "timed out" in text or "timeout" in text:
        return BmcTransientError(f"BMC at {address} unreachable: no answer in time (timed "
                                 "out); it may be busy or rebooting: retried")
    if "connection refused" in text or "errno 111" in text:
        return BmcTransientError(
            f"BMC at {address} unreachable: it refused the connection (nothing listens on "
            "that port): check the address and port; retried in case the BMC is restarting")
    if "name or service not known" in text or "nodename nor servname" in text or (
            "failed to resolve" in text):
        return BmcPermanentError(f"BMC at {address}: the host name does not resolve; check "
                                 "the address")
    return None


def error_kind(exc: Exception) -> str:
    """A failed call's kind, for gpulease_bmc_call_errors."""
    text = str(exc).lower()
    if isinstance(exc, sx.AccessError):
        return "auth"
    if isinstance(exc, sx.ResourceNotFoundError):
        return "not_found"
    if isinstance(exc, sx.ServerSideError):
        return "server_error"
    if isinstance(exc, sx.HTTPError):
        return "refused"
    if isinstance(exc, ValueError):
        return "not_redfish"
    if isinstance(exc, (sx.ConnectionError, requests.RequestException, OSError)):
        return "timeout" if "timed out" in text or "timeout" in text else "connection"
    return "other"


def _translate(exc: Exception, address: str) -> BmcError:
    """sushy / requests errors -> the port's transient or permanent errors."""
    message = str(exc)
    if isinstance(exc, sx.AccessError):
        return BmcPermanentError(f"BMC at {address} refused the credentials: {message}; "
                                 "check the user name and password")
    if isinstance(exc, sx.ResourceNotFoundError) and message.rstrip("/ ").endswith(
            ("/redfish/v1 not found", "/redfish/v1/ not found")):
        return BmcPermanentError(f"BMC at {address}: nothing speaks Redfish there (no service "
                                 "root at /redfish/v1); is this the BMC's address and port?")
    if isinstance(exc, sx.ResourceNotFoundError):
        return BmcPermanentError(f"BMC at {address}: {message}; check the system's path "
                                 "(GET /redfish/v1/Systems lists them)")
    if isinstance(exc, ValueError) and not isinstance(exc, sx.SushyError):
        return BmcPermanentError(f"BMC at {address} answered something that is not Redfish "
                                 f"JSON ({message[:120]}); is this the BMC's address?")
    if isinstance(exc, sx.ServerSideError):
        return BmcTransientError(f"BMC at {address} answered {exc.status_code}: {message}")
    if isinstance(exc, (sx.BadRequestError, sx.ResourceNotFoundError, sx.MissingActionError,
                        sx.InvalidParameterValueError)):
        return BmcPermanentError(f"BMC at {address}: {message}")
    if isinstance(exc, sx.HTTPError):
        retry = exc.status_code in (408, 429) or exc.status_code >= 500
        cls = BmcTransientError if retry else BmcPermanentError
        return cls(f"BMC at {address} answered {exc.status_code}: {message}")
    if isinstance(exc, (sx.ConnectionError, requests.RequestException, OSError)):
        return _connection_hint(message, address) or BmcTransientError(
            f"BMC at {address} unreachable: {message}")
    return BmcTransientError(f"BMC at {address}: {type(exc).__name__}: {message}")


RETRY_AFTER_CAP_S = 300.0  # a BMC's Retry-After is honoured up to this


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header's wait in seconds (delay-seconds or an HTTP date), capped."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_CAP_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), RETRY_AFTER_CAP_S)


TASK_TIMEOUT_S = 300.0  # a BMC's job (a Dell config job, a slow media mount) at most this
TASK_POLL_CAP_S = 30.0  # however long a task monitor's Retry-After asks
FAILED_TASK = {"Exception", "Killed", "Cancelled", "Interrupted"}


class _OneTry(sushy_connector.Connector):  # type: ignore[misc]
    """sushy's connector without its own quick retry of a 5xx (it tries again after its
    fixed delay, whatever Retry-After said): the engine retries, no sooner than the BMC
    asked. Each request names the worker it is made for (User-Agent). An action or a
    change the BMC accepts as a task (202 with a task monitor's Location) is followed to
    its end, at the pace the monitor's Retry-After asks, within TASK_TIMEOUT_S: the call
    returns once the BMC did it, and a task that ended in error is the call's error. A
    request that changes the server goes out only under a fresh claim (`guard_session`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        guard_session(self._session)

    def _op(self, method: str, path: str = "", data: Any = None,
            headers: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        kwargs["server_side_retries_left"] = 0
        headers = {**(headers or {}), "User-Agent": user_agent()}
        response = super()._op(method, path, data, headers, *args, **kwargs)
        if method in ("POST", "PATCH") and response.status_code == 202 and (
                response.headers.get("Location")):
            return self._follow(response.headers["Location"], response, headers)
        return response

    def _follow(self, monitor: str, response: Any, headers: dict[str, Any]) -> Any:
        deadline = time.monotonic() + TASK_TIMEOUT_S
        while response.status_code == 202:
            if time.monotonic() > deadline:
                raise BmcTransientError(f"the BMC's task {monitor} was not done in "
                                        f"{TASK_TIMEOUT_S:.0f} s; asked again later")
            wait = retry_after_s(response.headers.get("Retry-After"))
            time.sleep(min(wait if wait is not None else 1.0, TASK_POLL_CAP_S))
            response = super()._op("GET", urlsplit(monitor).path or monitor, None, headers,
                                   server_side_retries_left=0)
        state = _task_state(response)
        if state in FAILED_TASK:
            raise BmcPermanentError(f"the BMC's task {monitor} ended {state}: "
                                    f"{_task_messages(response)}")
        return response


def _task_state(response: Any) -> str | None:
    try:
        doc = response.json()
    except ValueError:
        return None
    return str(doc.get("TaskState")) if isinstance(doc, dict) and doc.get("TaskState") else None


def _task_messages(response: Any) -> str:
    doc = response.json()
    said = [str(m.get("Message") or m.get("MessageId") or "") for m in doc.get("Messages") or []
            if isinstance(m, dict)]
    return "; ".join(s for s in said if s)[:500] or "no message"


class RedfishDriver:
    """Holds one sushy connection per BMC endpoint (its service root is read once)."""

    def __init__(self, timeout_s: float = 10.0, verify_tls: bool = True) -> None:
        self.timeout_s = timeout_s
        self.verify_tls = verify_tls
        self._connections: dict[tuple[str, str, str], sushy.Sushy] = {}
        self._mutex = threading.Lock()
        self._said = threading.local()  # the Retry-After of this thread's last answer

    def _answered(self, response: requests.Response) -> None:
        self._said.retry_after = (retry_after_s(response.headers.get("Retry-After"))
                                  if response.status_code in (429, 503) else None)

    def retry_after(self) -> float | None:
        """What the BMC's last answer to this thread's call asked for (a 503 or 429's
        wait); None before the call's first answer."""
        return getattr(self._said, "retry_after", None)

    def calling(self) -> None:
        """A call begins: an earlier call's answer says nothing about it."""
        self._said.retry_after = None

    def bmc(self, endpoint: BmcEndpoint) -> RedfishBmc:
        return RedfishBmc(self, endpoint)

    def connection(self, root: str, username: str, password: str) -> sushy.Sushy:
        key = (root, username, password)
        with self._mutex:
            conn = self._connections.get(key)
        if conn is None:
            # One attempt per call: sushy reads 0 retries as "3, two seconds apart", and
            # the engine already retries with backoff and jitter.
            connect_s = min(self.timeout_s, 5.0)
            conn = sushy.Sushy(
                root, auth=sushy_auth.SessionOrBasicAuth(username=username, password=password),
                verify=self.verify_tls, read_timeout=self.timeout_s, connect_timeout=connect_s,
                connector=_OneTry(root, verify=self.verify_tls,
                                  response_callback=self._answered, server_side_retries=1,
                                  server_side_retries_delay=0.01,
                                  default_request_timeout=self.timeout_s,
                                  connect_timeout=connect_s),
            )
            with self._mutex:
                self._connections[key] = conn
        return conn

    def forget(self, root: str, username: str, password: str) -> None:
        with self._mutex:
            self._connections.pop((root, username, password), None)


class RedfishBmc:
    def __init__(self, driver: RedfishDriver, endpoint: BmcEndpoint) -> None:
        self._driver = driver
        self._endpoint = endpoint
        self._root, self._system_path = split_address(endpoint.address)

    # -- plumbing -------------------------------------------------------------------
    def _call(self, what: Callable[[], T]) -> T:
        self._driver.calling()
        try:
            return what()
        except Fenced:
            raise  # not sent: the worker's claim is gone (worker/pipelines/fence.py)
        except BmcError:
            bmc_error("redfish", "unsupported")  # the BMC lacks what the step needs
            raise
        except Exception as exc:
            bmc_error("redfish", error_kind(exc))
            if isinstance(exc, (sx.AccessError, sx.ConnectionError)):
                # a stale session or a restarted BMC: log in afresh next time
                self._driver.forget(self._root, self._endpoint.username,
                                    self._endpoint.password)
            error = _translate(exc, self._endpoint.address)
            wait = self._driver.retry_after()
            if isinstance(error, BmcTransientError) and wait is not None:
                error.retry_after_s = wait
                bmc_wait("redfish", wait)
            raise error from None

    def _conn(self) -> sushy.Sushy:
        return self._driver.connection(self._root, self._endpoint.username,
                                       self._endpoint.password)

    def _system(self) -> Any:
        conn = self._conn()
        if self._system_path:
            return conn.get_system(self._system_path)
        members = conn.get_system_collection().get_members()
        if len(members) != 1:
            raise BmcPermanentError(
                f"BMC at {self._endpoint.address} has {len(members)} systems; add the system's "
                "path to the address, e.g. …/redfish/v1/Systems/<id>"
            )
        return members[0]

    def _slot(self, system: Any, slot: MediaSlot) -> Any:
        return redfish_media.slot_drive(system, slot, self._endpoint.address)

    # -- the port -------------------------------------------------------------------
    def power_state(self) -> PowerState:
        return self._call(lambda: POWER_STATES.get(self._system().power_state,
                                                   PowerState.UNKNOWN))

    def power_on(self) -> None:
        def on() -> None:
            system = self._system()
            if system.power_state != sushy.PowerState.ON:
                system.reset_system(sushy.ResetType.ON)
        self._call(on)

    def power_off(self) -> None:
        def off() -> None:
            system = self._system()
            if system.power_state != sushy.PowerState.OFF:
                system.reset_system(sushy.ResetType.FORCE_OFF)
        self._call(off)

    def force_restart(self) -> None:
        self._call(lambda: self._system().reset_system(sushy.ResetType.FORCE_RESTART))

    def graceful_restart(self) -> None:
        self._call(lambda: self._system().reset_system(sushy.ResetType.GRACEFUL_RESTART))

    def set_one_time_boot(self, device: BootDevice, http_boot_uri: str | None = None) -> None:
        extra = {"http_boot_uri": http_boot_uri} if http_boot_uri else {}
        self._call(lambda: self._system().set_system_boot_options(
            target=BOOT_SOURCES[device], enabled=sushy.BootSourceOverrideEnabled.ONCE,
            **extra))

    def event_log(self, seen: Mapping[str, str] | None = None) -> BmcLog:
        def read() -> BmcLog:
            system = self._system()
            status = system.json.get("Status") or {}
            services = hw.log_services(system)
            expand = hw.expand_query(self._conn().json)
            entries = []
            for service in services:
                for e in hw.log_entries(system, service, expand=expand,
                                        after=(seen or {}).get(service) or None):
                    entries.append(LogEntry(
                        service=service, id=str(e.get("Id") or ""),
                        created=e.get("Created"), severity=e.get("Severity"),
                        message=str(e.get("Message") or ""), message_id=e.get("MessageId"),
                        sensor=e.get("SensorType")))
            return BmcLog(status.get("HealthRollup") or status.get("Health"),
                          tuple(services), tuple(entries))
        return self._call(read)

    def subscribe_events(self, destination: str, context: str) -> str | None:
        def subscribe() -> str | None:
            conn = self._conn()
            service = hw.event_service(conn)
            if service is None:
                return None
            path, doc = service
            payload: dict[str, Any] = {"Destination": destination, "Context": context,
                                       "Protocol": "Redfish"}
            if "Alert" in (doc.get("EventTypesForSubscription") or []):
                payload["EventTypes"] = ["Alert"]  # older services need the type named
            collection = hw.link(doc, "Subscriptions") or f"{path}/Subscriptions"
            answer = conn._conn.post(collection, data=payload)
            location = answer.headers.get("Location") or ""
            if not location:
                try:
                    location = str(answer.json().get("@odata.id") or "")
                except ValueError:
                    location = ""
            if not location:
                raise BmcPermanentError(
                    f"BMC at {self._endpoint.address} accepted the event subscription but "
                    "did not say where it is (no Location); it is polled instead")
            return urlsplit(location).path or location
        return self._call(subscribe)

    def subscription_alive(self, uri: str) -> bool:
        def alive() -> bool:
            try:
                self._conn()._conn.get(path=uri)
            except sx.ResourceNotFoundError:
                return False
            return True
        return self._call(alive)

    def clear_boot_override(self) -> None:
        self._call(lambda: self._system().set_system_boot_options(
            enabled=sushy.BootSourceOverrideEnabled.DISABLED))

    def insert_media(self, image_url: str, slot: MediaSlot = MediaSlot.CD) -> None:
        def insert() -> None:
            drive = self._slot(self._system(), slot)
            redfish_media.insert(drive, image_url, self._endpoint.address)
        self._call(insert)

    def eject_media(self) -> None:
        def eject() -> None:
            for drive in redfish_media.drives(self._system()):
                if drive.inserted:
                    drive.eject_media()
        self._call(eject)

    def inserted_media(self, slot: MediaSlot = MediaSlot.CD) -> str | None:
        def read() -> str | None:
            drive = self._slot(self._system(), slot)
            drive.refresh()
            return str(drive.image) if drive.inserted and drive.image else None
        result: str | None = self._call(read)
        return result

    def inventory(self) -> Inventory:
        return self._call(self._inventory)

    def _inventory(self) -> Inventory:
        system = self._system()
        unknown: list[str] = []

        def optional(name: str, read: Any) -> Any:
            try:
                return read()
            except (sx.MissingAttributeError, sx.ResourceNotFoundError, sx.ServerSideError,
                    sx.MissingActionError):
                unknown.append(name)
                return None

        warnings: list[str] = []
        memory = system.memory_summary
        memory_gib = getattr(memory, "size_gib", None) if memory else None
        if memory_gib is None:
            unknown.append("memory")
        cpus = optional("processors", lambda: hw.cpus(system))
        drives = optional("storage", lambda: hw.drives(system, warnings))
        macs = optional("nics", lambda: hw.nic_macs(system))
        pcie = hw.optional(unknown, "pcie", lambda: hw.pcie_devices(system)) or ()
        if not any(d.kind == "gpu" for d in pcie):  # many GPU servers list them per chassis
            pcie += hw.optional(warnings, "chassis PCIe devices unreadable",
                                lambda: hw.chassis_pcie(system)) or ()
        if not pcie and "pcie" not in unknown:
            unknown.append("pcie")  # an empty collection: the BMC lists none
        gpus = hw.gpus(system, pcie or None)
        if gpus is None:
            unknown.append("gpus")
        cooling = hw.optional(unknown, "thermal", lambda: hw.thermal(system))
        media = hw.optional(unknown, "virtual media", lambda: hw.virtual_media(system))
        boot = system.json.get("Boot") or {}
        targets = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
        return Inventory(
            system_id=system.identity, manufacturer=system.manufacturer, model=system.model,
            serial=system.serial_number, memory_gib=float(memory_gib) if memory_gib else None,
            processor_count=cpus.sockets if cpus else None,
            processor_model=cpus.model if cpus else None,
            drives=drives, nic_macs=macs, gpus=gpus, pcie_devices=pcie or None,
            temperatures=cooling[0] if cooling else None,
            fans=cooling[1] if cooling else None, unknown=tuple(unknown),
            uuid=str(system.uuid).lower() if system.uuid else None,
            cpu_cores=cpus.cores if cpus else None, cpu_threads=cpus.threads if cpus else None,
            virtual_media=media.types if media else None,
            media_one_slot=media.one_slot if media else None,
            media_protocols=media.protocols if media else None,
            boot_targets=tuple(targets) if isinstance(targets, list) else None,
            warnings=tuple(warnings), power=system.json.get("PowerState"),
        )
