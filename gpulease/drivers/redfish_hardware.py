"""The hardware a BMC lists beyond the basics: GPUs (Processors of type GPU, or PCIe
accelerators), PCIe devices with their link, and the chassis' temperatures and fans.
Vendor values go through lookup tables (PCI vendor ids, manufacturer spellings, PCIe
generations); whatever a BMC does not offer is unknown (None), never an error."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sushy import exceptions as sx
from sushy.resources.system import constants as sys_cons

from gpulease.domain.fleet.bmc_events import entry_key

T = TypeVar("T")

# PCI-SIG vendor ids of what rental servers carry.
PCI_VENDORS = {
    "0x10de": "NVIDIA", "0x19e5": "Huawei", "0x15b3": "NVIDIA Networking",
    "0x8086": "Intel", "0x1022": "AMD", "0x1002": "AMD", "0x144d": "Samsung",
    "0x1000": "Broadcom", "0x14e4": "Broadcom", "0x1344": "Micron", "0x1e0f": "KIOXIA",
    "0x1c5c": "SK hynix", "0x1dd8": "AMD Pensando", "0x1cc4": "Union Memory",
    "0x1a03": "ASPEED", "0x102b": "Matrox",
}
# Makers whose display controllers are the BMC's or the board's VGA, never a rented GPU.
DISPLAY_ONLY = frozenset({"ASPEED", "Matrox"})
# Makers whose accelerators are what rental servers sell.
ACCELERATOR_MAKERS = frozenset({"NVIDIA", "Huawei", "AMD"})
# Manufacturer names, normalised (`maker_key`), to one name.
MANUFACTURERS = {
    "nvidia": "NVIDIA", "mellanox": "NVIDIA Networking", "huawei": "Huawei",
    "hisilicon": "Huawei", "intel": "Intel", "amd": "AMD", "advanced micro devices": "AMD",
    "samsung": "Samsung", "broadcom": "Broadcom", "broadcom / lsi": "Broadcom", "lsi": "Broadcom",
    "micron": "Micron", "kioxia": "KIOXIA", "sk hynix": "SK hynix",
    "aspeed": "ASPEED", "matrox": "Matrox", "matrox electronics systems": "Matrox",
}
# What BMCs add around a maker's name: marks, legal forms.
_MAKER_NOISE = re.compile(
    r"\((?:r|tm|c)\)|[®™©]|\b(?:corporation|corp|incorporated|inc|co|ltd|limited|llc|gmbh|"
    r"technologies|technology|semiconductor)\b\.?", re.IGNORECASE)


def maker_key(name: str) -> str:
    """'Nvidia(R) Corporation', 'NVIDIA Corp.' → 'nvidia'; 'Huawei Technologies Co., Ltd.'
    → 'huawei'."""
    text = _MAKER_NOISE.sub(" ", name).lower()
    return re.sub(r"[\s,.]+", " ", text).strip()
ACCELERATOR_CLASSES = {sys_cons.DeviceClass.DISPLAY_CONTROLLER,
                       sys_cons.DeviceClass.PROCESSING_ACCELERATORS}
ACCELERATOR_CLASS_NAMES = frozenset(c.value for c in ACCELERATOR_CLASSES)
BENIGN = (sx.MissingAttributeError, sx.ResourceNotFoundError, sx.ServerSideError,
          sx.MissingActionError, sx.UnknownDefaultError)


@dataclass(frozen=True)
class GpuDevice:
    model: str | None
    vendor: str | None
    serial: str | None
    source: str  # processors | pcie


@dataclass(frozen=True)
class PcieDevice:
    name: str | None
    vendor: str | None
    model: str | None
    kind: str  # gpu | network | storage | other
    gen: int | None  # the link now (GPUs train down at idle)
    lanes: int | None
    max_gen: int | None
    max_lanes: int | None


@dataclass(frozen=True)
class Temperature:
    name: str | None
    celsius: float | None
    upper_critical: float | None
    health: str | None


@dataclass(frozen=True)
class Fan:
    name: str | None
    reading: float | None
    units: str | None
    health: str | None


def vendor_of(manufacturer: str | None = None, vendor_id: str | None = None) -> str | None:
    if vendor_id:
        found = PCI_VENDORS.get(vendor_id.lower())
        if found:
            return found
    if manufacturer and manufacturer.strip():
        return MANUFACTURERS.get(maker_key(manufacturer), manufacturer.strip())
    return None


def pcie_gen(value: Any) -> int | None:
    """'Gen5', 'PCIe Gen 4', sushy's PCIeType enum → 5, 4."""
    text = getattr(value, "value", value)
    m = re.search(r"(\d+)", str(text)) if text else None
    return int(m.group(1)) if m else None


def _health(status: Any) -> str | None:
    health = getattr(status, "health", None)
    return getattr(health, "value", health) if health is not None else None


def optional(unknown: list[str], name: str, read: Callable[[], T]) -> T | None:
    """`read()`, or None with `name` noted as unknown when the BMC lacks it."""
    try:
        return read()
    except BENIGN:
        unknown.append(name)
        return None


def is_accelerator(vendor: str | None, class_code: str | None, device_class: Any) -> bool:
    """A rented GPU or NPU, not a display controller: an accelerator's class (3D or
    processing accelerator; a plain VGA class only from an accelerator maker, as some PCIe
    cards report it) and never the board's or the BMC's VGA (ASPEED, Matrox)."""
    named = getattr(device_class, "value", device_class)  # sushy's enum, or the JSON's
    if named not in ACCELERATOR_CLASS_NAMES or vendor in DISPLAY_ONLY:
        return False
    vga = (class_code or "").lower().removeprefix("0x").startswith("0300")
    return not vga or vendor in ACCELERATOR_MAKERS


def _kind(device: Any) -> tuple[str, str | None]:
    """(kind, vendor) from the device's functions' classes, class codes and vendor ids."""
    vendor, kind = vendor_of(device.manufacturer), "other"
    try:
        functions = device.pcie_functions.get_members()
    except (BENIGN + (AttributeError,)):
        functions = []
    for fn in functions:
        vendor = vendor_of(device.manufacturer, fn.vendor_id) or vendor
        if is_accelerator(vendor, fn.json.get("ClassCode"), fn.device_class):
            kind = "gpu"
        elif fn.device_class == sys_cons.DeviceClass.NETWORK_CONTROLLER and kind == "other":
            kind = "network"
        elif (fn.device_class == sys_cons.DeviceClass.MASS_STORAGE_CONTROLLER
              and kind == "other"):
            kind = "storage"
    device_type = str(getattr(device.device_type, "value", "") or "")
    if kind == "other" and vendor in ("NVIDIA", "Huawei") and "GPU" in (device.model or "") + \
            (device.name or "") + device_type:
        kind = "gpu"
    return kind, vendor


def pcie_devices(system: Any) -> tuple[PcieDevice, ...]:
    out = []
    for d in system.pcie_devices.get_members():
        kind, vendor = _kind(d)
        link = d.pcie_interface
        out.append(PcieDevice(
            name=d.name, vendor=vendor, model=d.model, kind=kind,
            gen=pcie_gen(getattr(link, "pcie_type", None)),
            lanes=getattr(link, "lanes_in_use", None),
            max_gen=pcie_gen(getattr(link, "max_pcie_type", None)),
            max_lanes=getattr(link, "max_lanes", None)))
    return tuple(out)


def gpus(system: Any, pcie: tuple[PcieDevice, ...] | None) -> tuple[GpuDevice, ...] | None:
    """GPUs as Processors of type GPU or Accelerator (the DMTF way); else the PCIe
    accelerators (the system's and its chassis'); else the GraphicsControllers; None when
    the BMC lists none of these (unknown, not zero)."""
    try:
        found = [GpuDevice(p.model, vendor_of(p.manufacturer),
                           p.json.get("SerialNumber"), "processors")
                 for p in system.processors.get_members()
                 if p.processor_type in (sys_cons.ProcessorType.GPU,
                                         sys_cons.ProcessorType.ACCELERATOR)
                 and not _display_only(p.manufacturer, p.model)]
    except BENIGN:
        found = []
    if found:
        return tuple(found)
    if pcie:
        accel = [GpuDevice(d.model or d.name, d.vendor, None, "pcie")
                 for d in pcie if d.kind == "gpu"]
        if accel:
            return tuple(accel)
    try:
        graphics = graphics_controllers(system)
    except BENIGN + (ValueError,):
        graphics = ()
    return graphics or None


def _display_only(maker: str | None, model: str | None) -> bool:
    """A "GPU" processor that is the board's or the BMC's VGA (HPE and Lenovo list it)."""
    if vendor_of(maker) in DISPLAY_ONLY:
        return True
    return bool(re.search(r"\b(aspeed|matrox|ast2\d00|g200e)", model or "", re.IGNORECASE))


def thermal(system: Any) -> tuple[tuple[Temperature, ...], tuple[Fan, ...]]:
    """Every temperature and fan of the system's chassis (read from the JSON: the chassis
    document is shared with the PCIe devices' read)."""
    temps: list[Temperature] = []
    fans: list[Fan] = []
    links = [c.get("@odata.id") for c in system.json.get("Links", {}).get("Chassis", [])
             if isinstance(c, dict)]
    if not links:
        raise sx.MissingAttributeError(attribute="Links/Chassis", resource=system.path)
    for ref in links:
        path = _link(_doc(system, str(ref)), "Thermal")
        if path is None:
            continue
        th = _doc(system, path)
        temps += [Temperature(t.get("Name"), _number(t.get("ReadingCelsius")),
                              _number(t.get("UpperThresholdCritical")),
                              (t.get("Status") or {}).get("Health"))
                  for t in th.get("Temperatures") or [] if isinstance(t, dict)]
        fans += [Fan(f.get("Name") or f.get("FanName"), _number(f.get("Reading")),
                     f.get("ReadingUnits"), (f.get("Status") or {}).get("Health"))
                 for f in th.get("Fans") or [] if isinstance(f, dict)]
    return tuple(temps), tuple(fans)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


# --- read from the JSON, shaped as each vendor publishes it ----------------------------------
# sushy's typed resources reject what a vendor omits or spells its own way (a storage
# controller without MemberId); these readers walk the JSON and keep what they can read,
# noting what they could not as warnings.

@dataclass(frozen=True)
class Drive:
    name: str | None
    capacity_bytes: int | None
    serial: str | None


@dataclass(frozen=True)
class Cpus:
    sockets: int | None
    cores: int | None
    threads: int | None  # None when a BMC leaves a processor's thread count out
    model: str | None


def _doc(system: Any, path: str) -> dict[str, Any]:
    """The JSON at `path`, read once per inventory (cached on the system object, which
    lives for one read of the BMC)."""
    cache: dict[str, dict[str, Any]] = system.__dict__.setdefault("_gl_docs", {})
    if path not in cache:
        doc = system._conn.get(path=path).json()
        cache[path] = doc if isinstance(doc, dict) else {}
    return cache[path]


@dataclass(frozen=True)
class MediaFacts:
    """What the virtual drives offer: their media types, whether one drive is the only
    one for both the image (CD) and the config drive (USB), and the transfer protocols its
    CD drive's InsertMedia allows (None: the BMC does not name the parameter; empty: any)."""

    types: tuple[str, ...]
    one_slot: bool
    protocols: tuple[str, ...] | None


CD_TYPES, USB_TYPES = {"CD", "DVD"}, {"USBStick", "Floppy"}


def virtual_media(system: Any) -> MediaFacts:
    """The virtual drives under the system (Redfish 2021 and later, Dell iDRAC 6.x) or,
    where it has none, under the managers that manage it."""
    holders = [system.json] if _link(system.json, "VirtualMedia") else [
        _doc(system, m["@odata.id"]) for m in (
            system.json.get("Links", {}).get("ManagedBy") or []) if isinstance(m, dict)]
    if not holders:
        raise sx.MissingAttributeError(attribute="VirtualMedia", resource=system.path)
    drives = [d for holder in holders if (path := _link(holder, "VirtualMedia")) is not None
              for d in _members(system, path)]
    kinds = [{str(t) for t in d.get("MediaTypes") or []} for d in drives]
    cds = [i for i, k in enumerate(kinds) if k & CD_TYPES]
    usbs = [i for i, k in enumerate(kinds) if k & USB_TYPES]
    one_slot = bool(cds) and bool(usbs) and set(cds) == set(usbs) and len(cds) == 1
    return MediaFacts(tuple(sorted(set().union(*kinds))) if kinds else (), one_slot,
                      _protocols(system, drives[cds[0]]) if cds else None)


def _protocols(system: Any, drive: dict[str, Any]) -> tuple[str, ...] | None:
    return insert_protocols(drive, lambda uri: _doc(system, uri))


def insert_protocols(drive: dict[str, Any], read: Callable[[str], dict[str, Any]]
                     ) -> tuple[str, ...] | None:
    """The transfer protocols a virtual drive's InsertMedia accepts, as the action lists
    them itself or in its `@Redfish.ActionInfo` (read with `read`): () when it names the
    parameter without values, None when it does not name it at all."""
    action = (drive.get("Actions") or {}).get("#VirtualMedia.InsertMedia")
    if not isinstance(action, dict):
        return None
    inline = action.get("TransferProtocolType@Redfish.AllowableValues")
    if isinstance(inline, list):
        return tuple(str(v) for v in inline)
    uri = action.get("@Redfish.ActionInfo")
    if not isinstance(uri, str):
        return None
    for parameter in read(uri).get("Parameters") or []:
        if isinstance(parameter, dict) and parameter.get("Name") == "TransferProtocolType":
            return tuple(str(v) for v in parameter.get("AllowableValues") or [])
    return None


def event_service(conn: Any) -> tuple[str, dict[str, Any]] | None:
    """The service root's EventService (its path and JSON), or None when the BMC has none
    or has it switched off."""
    path = _link(conn.json, "EventService")
    if path is None:
        return None
    doc = conn._conn.get(path=path).json()
    if not isinstance(doc, dict) or doc.get("ServiceEnabled") is False:
        return None
    return path, doc


def link(doc: dict[str, Any], name: str) -> str | None:
    """The path a resource links to under `name`, or None."""
    return _link(doc, name)


def _link(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    path = value.get("@odata.id") if isinstance(value, dict) else None
    return path if isinstance(path, str) else None


def _members(system: Any, path: str) -> list[dict[str, Any]]:
    out = []
    for m in _doc(system, path).get("Members") or []:
        ref = m.get("@odata.id") if isinstance(m, dict) else None
        if isinstance(ref, str):
            out.append({"@odata.id": ref, **_doc(system, ref)})
    return out


def cpus(system: Any) -> Cpus:
    """Sockets, cores, threads and model from the Processors of type CPU."""
    path = _link(system.json, "Processors")
    if path is None:
        raise sx.MissingAttributeError(attribute="Processors", resource=system.path)
    cpu = [m for m in _members(system, path) if (m.get("ProcessorType") or "CPU") == "CPU"]
    if not cpu:
        raise sx.MissingAttributeError(attribute="Processors/Members", resource=system.path)

    def total(key: str) -> int | None:
        ints = [v for v in (m.get(key) for m in cpu) if isinstance(v, int) and v > 0]
        return sum(ints) if len(ints) == len(cpu) else None

    model = next((str(m["Model"]).strip() for m in cpu if m.get("Model")), None)
    return Cpus(len(cpu), total("TotalCores"), total("TotalThreads"), model)


# An Ethernet interface that is no port of the server: the BMC's own link to the host
# (Redfish host interface, USB NIC) or a VLAN of a port listed already.
_NOT_A_PORT = re.compile(r"host ?interface|usb ?nic|virtual ?nic|tomanager|\bvlan", re.I)


def nic_macs(system: Any) -> tuple[str, ...]:
    """The MAC of each physical port, once (VLAN copies and host interfaces left out)."""
    path = _link(system.json, "EthernetInterfaces")
    if path is None:
        raise sx.MissingAttributeError(attribute="EthernetInterfaces", resource=system.path)
    macs: list[str] = []
    for nic in _members(system, path):
        words = " ".join(str(nic.get(k) or "") for k in ("Id", "Name", "Description"))
        if nic.get("EthernetInterfaceType") == "Virtual" or _NOT_A_PORT.search(words):
            continue
        mac = str(nic.get("PermanentMACAddress") or nic.get("MACAddress") or "").lower()
        if mac and mac not in macs:
            macs.append(mac)
    return tuple(macs)


def drives(system: Any, warnings: list[str]) -> tuple[Drive, ...]:
    """Every drive of every storage subsystem; a controller that cannot be read is a
    warning, not every drive unknown. SimpleStorage where the BMC has no Storage."""
    found: list[Drive] = []
    storage = _link(system.json, "Storage")
    simple = _link(system.json, "SimpleStorage")
    try:
        subsystems = _members(system, storage) if storage is not None else []
    except BENIGN as exc:
        if simple is None:
            raise
        warnings.append(f"Storage unreadable ({exc}); drives read from SimpleStorage")
        subsystems = []
    for sub in subsystems:
        refs = [d.get("@odata.id") for d in sub.get("Drives") or [] if isinstance(d, dict)]
        for ref in refs:
            try:
                d = _doc(system, str(ref))
            except BENIGN + (ValueError,) as exc:
                warnings.append(f"drive {ref} unreadable: {exc}")
                continue
            found.append(Drive(d.get("Name"), _bytes(d.get("CapacityBytes")),
                               d.get("SerialNumber")))
    if not found and simple is not None:
        for sub in _members(system, simple):
            for dev in sub.get("Devices") or []:
                if isinstance(dev, dict) and (dev.get("Status") or {}).get("State") != "Absent":
                    found.append(Drive(dev.get("Name"), _bytes(dev.get("CapacityBytes")), None))
    if storage is None and simple is None:
        raise sx.MissingAttributeError(attribute="Storage", resource=system.path)
    return tuple(found)


def _bytes(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value > 0 else None


def chassis_pcie(system: Any) -> tuple[PcieDevice, ...]:
    """PCIe devices listed under the system's chassis (where many GPU servers put them),
    each classified by its functions' class and vendor id."""
    out: list[PcieDevice] = []
    for link in system.json.get("Links", {}).get("Chassis", []):
        ref = link.get("@odata.id") if isinstance(link, dict) else None
        if not isinstance(ref, str):
            continue
        path = _link(_doc(system, ref), "PCIeDevices")
        if path is None:
            continue
        for dev in _members(system, path):
            fn_path = _link(dev, "PCIeFunctions")
            fns = _members(system, fn_path) if fn_path else [
                _doc(system, f["@odata.id"]) for f in
                (dev.get("Links") or {}).get("PCIeFunctions") or [] if isinstance(f, dict)]
            vendor, kind = vendor_of(dev.get("Manufacturer")), "other"
            for fn in fns:
                vendor = vendor_of(dev.get("Manufacturer"), fn.get("VendorId")) or vendor
                cls = fn.get("DeviceClass")
                if is_accelerator(vendor, fn.get("ClassCode"), cls):
                    kind = "gpu"
                elif cls == "NetworkController" and kind == "other":
                    kind = "network"
                elif cls == "MassStorageController" and kind == "other":
                    kind = "storage"
            iface = dev.get("PCIeInterface") or {}
            out.append(PcieDevice(
                name=dev.get("Name"), vendor=vendor, model=dev.get("Model"), kind=kind,
                gen=pcie_gen(iface.get("PCIeType")), lanes=iface.get("LanesInUse"),
                max_gen=pcie_gen(iface.get("MaxPCIeType")), max_lanes=iface.get("MaxLanes")))
    return tuple(out)


def graphics_controllers(system: Any) -> tuple[GpuDevice, ...]:
    """GPUs as the system's GraphicsControllers (Redfish 2022.1 and later)."""
    path = _link(system.json, "GraphicsControllers")
    if path is None:
        return ()
    return tuple(GpuDevice(g.get("Model") or g.get("Name"), vendor_of(g.get("Manufacturer")),
                           g.get("SerialNumber"), "graphics")
                 for g in _members(system, path)
                 if not _display_only(g.get("Manufacturer"), g.get("Model") or g.get("Name")))


def log_services(system: Any) -> list[str]:
    """The log services of the system and of the managers that manage it (iDRAC keeps its
    SEL under the manager, most others under the system)."""
    paths: list[str] = []
    holders = [system.json] + [_doc(system, m["@odata.id"]) for m in (
        system.json.get("Links", {}).get("ManagedBy") or []) if isinstance(m, dict)]
    for holder in holders:
        path = _link(holder, "LogServices")
        if path is None:
            continue
        for m in _doc(system, path).get("Members") or []:
            ref = m.get("@odata.id") if isinstance(m, dict) else None
            if isinstance(ref, str) and ref not in paths:
                paths.append(ref)
    return paths


MAX_LOG_PAGES = 50  # a paged log read whole, within a bound (a loop of links ends too)


def expand_query(root: dict[str, Any]) -> str | None:
    """The `$expand` a service root says it takes for a collection's members, one level
    down (DSP0266: `.` expands what is not under Links, `*` everything), or None."""
    features = root.get("ProtocolFeaturesSupported")
    expand = features.get("ExpandQuery") if isinstance(features, dict) else None
    if not isinstance(expand, dict):
        return None
    levels = expand.get("Levels") is True and int(expand.get("MaxLevels") or 0) >= 1
    if expand.get("NoLinks") is True:
        return "$expand=.($levels=1)" if levels else "$expand=."
    if expand.get("ExpandAll") is True:
        return "$expand=*($levels=1)" if levels else "$expand=*"
    return None


def log_entries(system: Any, service: str, limit: int = 500, expand: str | None = None,
                after: str | None = None) -> list[dict[str, Any]]:
    """The newest `limit` entries of one log service: every page of the collection
    (`Members@odata.nextLink` followed, within MAX_LOG_PAGES), members inline, expanded
    with `expand` where the BMC offers it (one request a page), or read one by one where
    a page still only links them: then, given `after` (the cursor's last entry read,
    bmc_events.entry_key), newest first by their numeric ids, up to the first one not
    after it, so a read that finds nothing new costs the pages and one entry."""
    entries = _link(_doc(system, service), "Entries")
    if entries is None:
        return []
    if expand:
        entries = f"{entries}{'&' if '?' in entries else '?'}{expand}"
    members: list[Any] = []
    page: str | None = entries
    pages: set[str] = set()
    while page is not None and page not in pages and len(pages) < MAX_LOG_PAGES:
        pages.add(page)
        doc = _doc(system, page)
        members.extend(doc.get("Members") or [])
        following = doc.get("Members@odata.nextLink")
        page = following if isinstance(following, str) else None
    newest = members[-limit:]
    if after and newest and all(_linked_by_number(m) for m in newest):
        return _newer_than(system, newest, after)
    out = []
    for m in newest:
        if isinstance(m, dict) and "Message" not in m and isinstance(m.get("@odata.id"), str):
            m = _doc(system, m["@odata.id"])
        if isinstance(m, dict):
            out.append(m)
    return out


def _linked_by_number(member: Any) -> bool:
    """A member given only as its link, whose last segment (its Id) is a number."""
    return (isinstance(member, dict) and "Message" not in member
            and isinstance(member.get("@odata.id"), str)
            and member["@odata.id"].rstrip("/").rsplit("/", 1)[-1].isdigit())


def _newer_than(system: Any, linked: list[dict[str, Any]], after: str) -> list[dict[str, Any]]:
    """The linked entries after the cursor `after`, oldest first, read newest first until
    one is not after it (a cleared log numbers from 1 again: its entries are newer by their
    time, and are read on until an old one or the end)."""
    newer: list[dict[str, Any]] = []
    for m in sorted(linked, key=lambda m: int(m["@odata.id"].rstrip("/").rsplit("/", 1)[-1]),
                    reverse=True):
        doc = _doc(system, m["@odata.id"])
        if entry_key(doc.get("Created"), str(doc.get("Id") or "")) <= after:
            break
        newer.append(doc)
    return newer[::-1]
