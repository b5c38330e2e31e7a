"""Does what a BMC reports match the offer's host configuration? Pure comparison: facts the
BMC does not report are listed as unchecked, never counted as a mismatch."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from urllib.parse import urlsplit

from gpulease.domain.catalog import Offer

MEMORY_TOLERANCE = Decimal("0.05")  # BMCs report usable memory, a little under installed
DRIVE_TOLERANCE = Decimal("0.05")  # "7.68 TB" drives report 7.68e12 bytes, or a bit less
GPU_MEMORY_TOLERANCE = Decimal("0.10")
# A GPU family in a model name: H100, A800, 4090, 910B (not 80GB)
_FAMILY = re.compile(r"(?<![A-Z0-9])([A-Z]{0,3}\d{3,4}[A-Z]?)(?![A-Z0-9])")
_GPU_MEMORY = re.compile(r"(\d{2,3})\s*G(?:I?B)?(?![A-Z0-9])")
# What BMCs print where a serial or UUID was never set.
PLACEHOLDERS = {"", "to be filled by o.e.m.", "default string", "none", "n/a", "na",
                "not specified", "system serial number", "0123456789", "unknown",
                "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                "03000200-0400-0500-0006-000700080009"}


def identity(value: str | None) -> str | None:
    """A serial or UUID that names one server, lower-cased; None for a placeholder."""
    text = (value or "").strip().lower()
    return None if text in PLACEHOLDERS else text


def bmc_key(address: str) -> str:
    """One spelling per BMC endpoint: scheme and case ignored, the default port and any
    trailing slash dropped, the system's path kept (an emulator serves many systems on
    one port). 'https://BMC-1:443/redfish/v1/' and 'http://bmc-1/' are the same BMC."""
    parts = urlsplit(address.strip())
    host = (parts.hostname or "").lower()
    port = parts.port
    if port in (80, 443):
        port = None
    netloc = f"[{host}]" if ":" in host else host
    path = re.sub(r"/+", "/", parts.path).rstrip("/")
    system = path if "/Systems/" in path else ""
    return f"{netloc}{f':{port}' if port else ''}{system}"


@dataclass(frozen=True)
class GpuModel:
    """What the offer's GPU is called, reduced to what BMCs print of it."""

    name: str  # the catalog's, e.g. "NVIDIA H100 SXM 80GB"
    memory_gb: int

    @property
    def family(self) -> str | None:
        found = _FAMILY.findall(self.name.upper())
        return found[0] if found else None


def form_factor(model: str) -> str | None:
    """SXM (or an HGX board) or PCIe, as a GPU model's name says it; None when it does not
    (an offer of "H100 SXM" sells NVLink at 900 GB/s, which no PCIe card has)."""
    text = model.upper()
    if re.search(r"SXM|HGX", text):
        return "SXM"
    if re.search(r"PCI-?E|\bNVL\b", text):
        return "PCIe"
    return None


def gpu_model_difference(reported: tuple[str, ...], want: GpuModel) -> str | None | bool:
    """A difference naming the GPUs that are another model (family, memory, or SXM against
    PCIe where both names say it); True when every model read matches; None when no model
    names a family (a BMC that says only "GPU")."""
    family = want.family
    wanted_form = form_factor(want.name)
    if family is None:
        return None
    others: list[str] = []
    named = False
    for model in reported:
        text = model.upper()
        families = _FAMILY.findall(text)
        if not families:
            continue
        named = True
        memory = _GPU_MEMORY.findall(text)
        off_memory = memory and abs(Decimal(memory[0]) - want.memory_gb) > (
            want.memory_gb * GPU_MEMORY_TOLERANCE)
        form = form_factor(model)
        off_form = wanted_form is not None and form is not None and form != wanted_form
        if family not in families or off_memory or off_form:
            others.append(model)
    if others:
        shown = ", ".join(f"{n} × {m}" for m, n in sorted(
            {m: others.count(m) for m in others}.items()))
        return f"GPU model {shown}, offer says {want.name}"
    return True if named else None


@dataclass(frozen=True)
class GpuLink:
    """A GPU's PCIe link as the BMC reads it now, and what the slot allows."""

    name: str
    gen: int | None
    lanes: int | None
    max_gen: int | None
    max_lanes: int | None


@dataclass(frozen=True)
class Facts:
    memory_gib: float | None
    drive_count: int | None
    drive_bytes: tuple[int, ...] | None
    nic_count: int | None
    gpu_count: int | None = None
    gpu_vendors: tuple[str, ...] = ()
    gpu_links: tuple[GpuLink, ...] = ()
    hot: tuple[str, ...] = ()  # sensors at or above their critical threshold, or unhealthy
    gpu_models: tuple[str, ...] = ()
    virtual_media: tuple[str, ...] | None = None  # media types of the virtual drives
    media_one_slot: bool | None = None  # one drive for both the image and the config drive
    media_protocols: tuple[str, ...] | None = None  # InsertMedia's transfer protocols
    media_scheme: str | None = None  # how the platform serves this server's media (https)
    boot_targets: tuple[str, ...] | None = None  # one-time boot targets the BMC allows
    warnings: tuple[str, ...] = ()  # parts of the inventory the BMC did not give
    cpu_sockets: int | None = None
    cpu_cores: int | None = None  # physical, all sockets
    cpu_threads: int | None = None  # logical, all sockets (None: the BMC did not say)
    cpu_model: str | None = None


def nothing_checkable(facts: Facts) -> bool:
    """The BMC reports neither memory, GPUs, drives nor NICs: nothing says this server is
    what the offer sells (a BMC account without inventory rights, or a bare service root)."""
    return (facts.memory_gib is None and facts.gpu_count is None and facts.drive_count is None
            and facts.nic_count is None)


@dataclass(frozen=True)
class Comparison:
    differences: tuple[str, ...]
    unchecked: tuple[str, ...]
    checked: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # worth a look, not a mismatch

    @property
    def matches(self) -> bool:
        return not self.differences

    def report(self) -> str:
        parts = []
        if self.differences:
            parts.append("differs from the offer: " + "; ".join(self.differences))
        if self.checked:
            parts.append("matches: " + ", ".join(self.checked))
        if self.unchecked:
            parts.append("not reported by the BMC: " + ", ".join(self.unchecked))
        if self.notes:
            parts.append("notes: " + "; ".join(self.notes))
        return ". ".join(parts) or "nothing to compare"


def compare(offer: Offer, facts: Facts, gpu_count: int | None = None,
            gpu_vendor: str | None = None, gpu_model: GpuModel | None = None) -> Comparison:
    """`gpu_count`, `gpu_vendor` and `gpu_model` are the offer's SKU's (checked when the
    BMC lists GPUs)."""
    differences: list[str] = []
    unchecked: list[str] = []
    checked: list[str] = []
    notes: list[str] = []
    if gpu_count is not None:
        if facts.gpu_count is None:
            unchecked.append("GPUs")
        elif facts.gpu_count != gpu_count:
            differences.append(f"{facts.gpu_count} GPUs, offer says {gpu_count}")
        elif gpu_vendor and facts.gpu_vendors and any(
                v.lower() != gpu_vendor.lower() for v in facts.gpu_vendors):
            differences.append(f"GPU vendor {', '.join(sorted(set(facts.gpu_vendors)))}, "
                               f"offer says {gpu_vendor}")
        else:
            checked.append("GPUs")
    if gpu_model is not None and facts.gpu_count:
        model = gpu_model_difference(facts.gpu_models, gpu_model)
        if isinstance(model, str):
            differences.append(model)
        elif model is None:
            unchecked.append("GPU model")
        else:
            checked.append("GPU model")
    for link in facts.gpu_links:
        if link.max_gen and link.max_lanes and (link.gen, link.lanes) != (
                link.max_gen, link.max_lanes) and link.gen is not None:
            notes.append(f"{link.name} links at Gen{link.gen} x{link.lanes} of Gen"
                         f"{link.max_gen} x{link.max_lanes} (idle GPUs train down; the "
                         "acceptance suite measures the real bandwidth)")
    notes += [f"{s} (chassis sensor)" for s in facts.hot]
    if facts.memory_gib is None:
        unchecked.append("memory")
    else:
        expected = Decimal(offer.memory_gb)
        if abs(Decimal(str(facts.memory_gib)) - expected) > expected * MEMORY_TOLERANCE:
            differences.append(f"memory {facts.memory_gib:g} GiB, offer says {offer.memory_gb} GB")
        else:
            checked.append("memory")
    wanted_drives = sum(d.count for d in offer.disks)
    if facts.drive_count is None:
        unchecked.append("drives")
    elif facts.drive_count < wanted_drives:
        differences.append(f"{facts.drive_count} drives, offer says {wanted_drives}")
    else:
        sizes = _drive_sizes(offer, facts.drive_bytes) if facts.drive_bytes else None
        if isinstance(sizes, str):
            differences.append(sizes)
        elif sizes is None:
            checked.append("drive count")
            unchecked.append("drive sizes")
        else:
            checked.append("drives")
    notes += [f"inventory: {w}" for w in facts.warnings]
    if offer.nic_count is not None:  # the offer may leave NICs unchecked
        if facts.nic_count is None:
            unchecked.append("NICs")
        elif facts.nic_count != offer.nic_count:
            differences.append(f"{facts.nic_count} NICs, offer says {offer.nic_count}")
        else:
            checked.append("NICs")
    _cpu(offer, facts, differences, unchecked, checked)
    _boot_mode(offer, facts, differences, unchecked, checked)
    return Comparison(tuple(differences), tuple(unchecked), tuple(checked), tuple(notes))


_SOCKETS = re.compile(r"^\s*(\d+)\s*[×xX*]")
CPU_FAMILIES = ("intel", "amd", "kunpeng", "ampere", "hygon")


def _cpu(offer: Offer, facts: Facts, differences: list[str], unchecked: list[str],
         checked: list[str]) -> None:
    """The offer's CPU ("2 × Intel, 64 logical cores each": `cpu_logical_cores` in all)
    against the BMC's sockets, threads (or cores, when the BMC leaves threads out: at most
    two threads a core) and model family. Unknown stays unchecked; a smaller CPU is a
    named difference."""
    if facts.cpu_sockets is None and facts.cpu_cores is None and facts.cpu_threads is None:
        unchecked.append("CPU")
        return
    said: list[str] = []
    sockets = _SOCKETS.match(offer.cpu)
    if sockets and facts.cpu_sockets is not None and facts.cpu_sockets < int(sockets[1]):
        said.append(f"{facts.cpu_sockets} CPU sockets, offer says {sockets[1]}")
    want = offer.cpu_logical_cores
    if facts.cpu_threads is not None:
        if facts.cpu_threads < want:
            said.append(f"{facts.cpu_threads} logical CPU cores, offer says {want}")
    elif facts.cpu_cores is not None and facts.cpu_cores * 2 < want:
        said.append(f"{facts.cpu_cores} CPU cores (at most {facts.cpu_cores * 2} logical), "
                    f"offer says {want} logical")
    elif facts.cpu_cores is not None:
        unchecked.append("CPU threads")
    family = next((f for f in CPU_FAMILIES if f in offer.cpu.lower()), None)
    if family and facts.cpu_model and family not in facts.cpu_model.lower():
        said.append(f"CPU {facts.cpu_model}, offer says {offer.cpu}")
    if said:
        differences.extend(said)
    else:
        checked.append("CPU")


def _drive_sizes(offer: Offer, sizes: tuple[int, ...]) -> str | bool | None:
    """Each of the offer's disk lines found among the drives, by capacity within 5 %:
    True, a difference, or None when drives of unknown size could be the missing ones."""
    pool = sorted(b for b in sizes if b)
    unknown = sum(1 for b in sizes if not b)
    missing = []
    for disk in sorted(offer.disks, key=lambda d: -d.size_tb):
        want = disk.size_tb * Decimal(10**12)
        fit = [b for b in pool if abs(Decimal(b) - want) <= want * DRIVE_TOLERANCE][:disk.count]
        for b in fit:
            pool.remove(b)
        if len(fit) < disk.count:
            missing.append((disk, len(fit)))
    if not missing:
        return True
    if unknown >= sum(d.count - n for d, n in missing):
        return None
    found = ", ".join(f"{n} × {Decimal(b) / 10**12:.2f} TB" for b, n in sorted(
        {b: sizes.count(b) for b in sizes if b}.items(), reverse=True)) or "no sizes"
    return ("drives: " + "; ".join(f"offer says {d.count} × {d.size_tb} TB {d.kind}, "
                                   f"{n} found" for d, n in missing) + f" (the BMC lists "
            f"{found})")


def _media_protocol(facts: Facts, differences: list[str], unchecked: list[str]) -> None:
    """The BMC must be able to fetch the platform's media over the scheme it serves them
    with (OpenBMC takes HTTPS only): found here, not after a deploy's five tries."""
    if facts.media_scheme is None or facts.media_protocols is None:
        if facts.media_scheme is not None and facts.virtual_media is not None:
            unchecked.append("virtual media protocol")
        return
    scheme = facts.media_scheme.upper()
    if facts.media_protocols and scheme not in facts.media_protocols:
        differences.append(f"the BMC fetches virtual media only over "
                           f"{' or '.join(facts.media_protocols)}, and this platform serves "
                           f"it over {scheme}: serve it over "
                           f"{facts.media_protocols[0].lower()} (GPULEASE_MEDIA_BASE_URL, or "
                           "the site's media_base_url)")


def _boot_mode(offer: Offer, facts: Facts, differences: list[str], unchecked: list[str],
               checked: list[str]) -> None:
    """What the offer's way of booting needs from the BMC."""
    if offer.boot == "virtual_media":
        if facts.virtual_media is None:
            unchecked.append("virtual media")
            return
        have = {m.lower() for m in facts.virtual_media}
        lacks = [name for name, kinds in (("CD", {"cd", "dvd"}),
                                          ("USB", {"usbstick", "floppy"}))
                 if not have & kinds]
        if lacks:
            differences.append(f"no virtual {' or '.join(lacks)} slot, which virtual-media "
                               "deploys need (the image on CD, the config drive on USB); "
                               "use network boot for this offer")
        elif facts.media_one_slot and offer.deploy != "image":
            differences.append("one virtual drive takes both CD and USB media, and an "
                               "installer deploy needs the image and the config drive at "
                               "once; sell this server with an image-based deploy (deploy = "
                               "\"image\": the config drive follows the ramdisk) or network "
                               "boot")
        else:
            checked.append("virtual media")
        _media_protocol(facts, differences, unchecked)
        return
    target = {"pxe": "Pxe", "uefi_http": "UefiHttp"}[offer.boot]
    if facts.boot_targets is None:
        unchecked.append("boot targets")
    elif target not in facts.boot_targets:
        differences.append(f"the BMC cannot boot once from {target} (it allows "
                           f"{', '.join(facts.boot_targets)}), which this offer needs")
    else:
        checked.append(f"{target} boot")
