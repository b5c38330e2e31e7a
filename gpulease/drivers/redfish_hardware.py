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
from sushy.resources.chassis.chassis import Chassis
from sushy.resources.system import constants as sys_cons

T = TypeVar("T")

# PCI-SIG vendor ids of what rental servers carry.
PCI_VENDORS = {
    "0x10de": "NVIDIA", "0x19e5": "Huawei", "0x15b3": "NVIDIA Networking",
    "0x8086": "Intel", "0x1022": "AMD", "0x1002": "AMD", "0x144d": "Samsung",
    "0x1000": "Broadcom", "0x14e4": "Broadcom", "0x1344": "Micron", "0x1e0f": "KIOXIA",
    "0x1c5c": "SK hynix", "0x1dd8": "AMD Pensando", "0x1cc4": "Union Memory",
}
# Manufacturer strings as BMCs spell them, to one name.
MANUFACTURERS = {
    "nvidia": "NVIDIA", "nvidia corporation": "NVIDIA", "nvidia corp.": "NVIDIA",
    "mellanox": "NVIDIA Networking", "mellanox technologies": "NVIDIA Networking",
    "huawei": "Huawei", "huawei technologies co., ltd.": "Huawei", "hisilicon": "Huawei",
    "intel": "Intel", "intel corporation": "Intel", "intel(r) corporation": "Intel",
    "amd": "AMD", "advanced micro devices, inc.": "AMD", "samsung": "Samsung",
    "broadcom": "Broadcom", "broadcom / lsi": "Broadcom",
}
ACCELERATOR_CLASSES = {sys_cons.DeviceClass.DISPLAY_CONTROLLER,
                       sys_cons.DeviceClass.PROCESSING_ACCELERATORS}
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
    if manufacturer:
        return MANUFACTURERS.get(manufacturer.strip().lower(), manufacturer.strip())
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


def _kind(device: Any) -> tuple[str, str | None]:
    """(kind, vendor) from the device's functions' classes and vendor ids."""
    vendor, kind = vendor_of(device.manufacturer), "other"
    try:
        functions = device.pcie_functions.get_members()
    except (BENIGN + (AttributeError,)):
        functions = []
    for fn in functions:
        vendor = vendor_of(device.manufacturer, fn.vendor_id) or vendor
        if fn.device_class in ACCELERATOR_CLASSES:
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
    """GPUs as Processors of type GPU (the DMTF way); else the PCIe accelerators; None
    when the BMC lists neither (unknown, not zero)."""
    try:
        found = [GpuDevice(p.model, vendor_of(p.manufacturer),
                           p.json.get("SerialNumber"), "processors")
                 for p in system.processors.get_members()
                 if p.processor_type == sys_cons.ProcessorType.GPU]
    except BENIGN:
        found = []
    if found:
        return tuple(found)
    if pcie:
        accel = [GpuDevice(d.model or d.name, d.vendor, None, "pcie")
                 for d in pcie if d.kind == "gpu"]
        if accel:
            return tuple(accel)
    return None


def _chassis(system: Any) -> list[Any]:
    links = system.json.get("Links", {}).get("Chassis", [])
    conn, out = system._conn, []
    for link in links:
        path = link.get("@odata.id") if isinstance(link, dict) else None
        if path:
            out.append(Chassis(conn, path, redfish_version=system.redfish_version,
                               registries=system.registries, root=system.root))
    return out


def thermal(system: Any) -> tuple[tuple[Temperature, ...], tuple[Fan, ...]]:
    """Every temperature and fan of the system's chassis."""
    temps: list[Temperature] = []
    fans: list[Fan] = []
    chassis = _chassis(system)
    if not chassis:
        raise sx.MissingAttributeError(attribute="Links/Chassis", resource=system.path)
    for ch in chassis:
        th = ch.thermal
        temps += [Temperature(t.name, t.reading_celsius, t.upper_threshold_critical,
                              _health(t.status)) for t in (th.temperatures or [])]
        fans += [Fan(f.name, f.reading, getattr(f.reading_units, "value", f.reading_units),
                     _health(f.status)) for f in (th.fans or [])]
    return tuple(temps), tuple(fans)
