"""The catalog: GPU spec sheet, regions, server SKUs, offers, images and container offers.

Loaded from a TOML file the operator owns (the default ships in gpulease/data). Loading
validates every entry and cross-reference, and an error names the file, the entry and the
field, so a typo is found at start-up rather than at the first order.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpulease.domain.billing.money import Money, to_fen
from gpulease.domain.fleet.acceptance import GpuSpec, Thresholds

DEFAULT_CATALOG = Path(__file__).resolve().parent.parent / "data" / "catalog.toml"


class CatalogError(Exception):
    """The catalog file is unreadable or inconsistent; the message says where and why."""


class Term(StrEnum):
    HOUR = "hour"
    DAY = "day"
    MONTH = "month"
    YEAR = "year"


BARE_METAL_TERMS = (Term.DAY, Term.MONTH, Term.YEAR)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Site(_Entry):
    """A data centre: its regions' servers sit on its management network, which only its
    own workers reach (`gpulease worker --site`), fetch their images from its media server
    (`media_base_url`; default: GPULEASE_MEDIA_BASE_URL), and network-boot from its boot
    networks (`boot_networks`, CIDRs; empty: any of GPULEASE_BOOT_NETWORKS)."""

    id: str = Field(pattern=r"^[a-z0-9-]+$", max_length=64)
    name_zh: str
    name_en: str
    media_base_url: str | None = Field(default=None, pattern=r"^https?://")
    # a mirror of the image store near the servers: built images are fetched from
    # <image_cache_url>/<image>.raw (their SHA-256 checked by the deploy ramdisk as ever)
    image_cache_url: str | None = Field(default=None, pattern=r"^http://")
    boot_networks: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _networks(self) -> Site:
        for network in self.boot_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"boot_networks: {network!r} is not a network "
                                 "(10.20.0.0/16)") from None
        return self

    def boots_from(self, address: str) -> bool:
        """Whether a server may network-boot from `address` (any, when none declared)."""
        if not self.boot_networks:
            return True
        ip = ipaddress.ip_address(address)
        return any(ip in ipaddress.ip_network(n, strict=False) for n in self.boot_networks)


class Region(_Entry):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    name_zh: str
    name_en: str
    site: str | None = None  # the [[sites]] entry it belongs to; unset: a site of its own

    @property
    def site_id(self) -> str:
        return self.site or self.id


class Gpu(_Entry):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    name: str
    vendor: str = Field(pattern=r"^(nvidia|huawei)$")
    memory_gb: int = Field(gt=0)
    memory_type: str
    memory_bandwidth_tbps: Decimal = Field(gt=0)
    bf16_dense_tflops: Decimal = Field(gt=0)
    fp16_tflops_advertised: Decimal | None = None
    gpu_link: str
    nvlink: bool
    host_link: str
    pcie_gen: int = Field(ge=3, le=6)
    measured_bf16_matmul_tflops: Decimal | None = None


class Disk(_Entry):
    count: int = Field(gt=0)
    size_tb: Decimal = Field(gt=0)
    kind: str = "NVMe"


class AcceptanceMarks(_Entry):
    """Pass marks for the acceptance suite (domain/acceptance.Thresholds); unset = default."""

    allreduce_busbw_gbps: Decimal | None = Field(default=None, gt=0)
    fio_randread_iops: Decimal | None = Field(default=None, gt=0)
    fio_seqread_mbps: Decimal | None = Field(default=None, gt=0)
    matmul_ceiling_fraction: Decimal | None = Field(default=None, gt=0, le=1)
    matmul_node_spread: Decimal | None = Field(default=None, gt=0, le=1)
    hbm_fraction: Decimal | None = Field(default=None, gt=0, le=1)
    h2d_gbps: Decimal | None = Field(default=None, gt=0)
    p2p_gbps: Decimal | None = Field(default=None, gt=0)
    burnin_s: Decimal | None = Field(default=None, ge=0)
    gpu_temp_max_c: Decimal | None = Field(default=None, gt=0, le=130)
    memory_temp_max_c: Decimal | None = Field(default=None, gt=0, le=130)


class Sku(_Entry):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    gpu: str
    gpu_count: int = Field(gt=0, le=16)
    gpu_interconnect: str
    gpu_interconnect_gbps: Decimal = Field(gt=0, description="GPU-GPU bandwidth, GB/s")
    advertised_interconnect: str | None = None
    network: str
    infiniband: bool
    # The node's network to other nodes, all its ports (Gb/s: 8 × 400 Gb/s NDR = 3200); the
    # advisor's time for gradient traffic across nodes.
    network_gbits: Decimal | None = Field(default=None, gt=0)
    acceptance: AcceptanceMarks = AcceptanceMarks()


class PriceChange(_Entry):
    """A price that takes effect on a date (UTC). Orders and quotes from then on use it; a
    running lease keeps the price it started with."""

    effective_from: date
    monthly_price: Money | None = Field(default=None, gt=0)  # bare-metal offers
    list_monthly_price: Money | None = None
    price_per_gpu_hour: Money | None = Field(default=None, gt=0)  # container offers


def _due(changes: tuple[PriceChange, ...], at: datetime) -> PriceChange | None:
    due = [c for c in changes if c.effective_from <= at.date()]
    return due[-1] if due else None


def _check_changes(changes: tuple[PriceChange, ...], field: str) -> None:
    dates = [c.effective_from for c in changes]
    if dates != sorted(set(dates)):
        raise ValueError("price_changes must be in order of effective_from, one per date")
    if any(getattr(c, field) is None for c in changes):
        raise ValueError(f"each of price_changes needs {field}")


class SeverityClock(_Entry):
    """A clock's length per ticket severity; None: no such clock for that severity."""

    P1: Decimal | None = Field(default=None, gt=0)
    P2: Decimal | None = Field(default=None, gt=0)
    P3: Decimal | None = Field(default=None, gt=0)

    def of(self, severity: str) -> Decimal | None:
        value: Decimal | None = getattr(self, severity)
        return value


class SupportTerms(_Entry):
    """The support an offer comes with: how soon a ticket of each severity gets its first
    response (minutes), its mitigation (hours: the tenant served again) and its resolution
    (hours)."""

    response_minutes: SeverityClock = SeverityClock(P1=Decimal(15), P2=Decimal(60),
                                                    P3=Decimal(480))
    mitigation_hours: SeverityClock = SeverityClock(P1=Decimal(4), P2=Decimal(24))
    resolution_hours: SeverityClock = SeverityClock(P1=Decimal(72), P2=Decimal(168),
                                                    P3=Decimal(336))
    # Operators are warned when this share of a clock has run without its milestone.
    warn_at: Decimal = Field(default=Decimal("0.8"), gt=0, lt=1)


class Offer(_Entry):
    """A SKU in one region, with that region's host configuration and monthly price."""

    sku: str
    region: str
    cpu: str
    cpu_logical_cores: int = Field(gt=0)
    memory: str
    memory_gb: int = Field(gt=0)
    disks: tuple[Disk, ...]
    monthly_price: Money = Field(gt=0)
    list_monthly_price: Money | None = None
    default_image: str
    example: bool = False
    # Network ports the BMC should list (Ethernet + InfiniBand); None = not checked.
    nic_count: int | None = Field(default=None, gt=0)
    # The server's port to the outside, Gbit/s: reported egress beyond what it could carry
    # is held for an operator, not charged.
    uplink_gbps: Decimal = Field(default=Decimal(25), gt=0)
    # Overrides the SKU's acceptance marks for this region's hosts (e.g. slower disks).
    acceptance: AcceptanceMarks = AcceptanceMarks()
    price_changes: tuple[PriceChange, ...] = ()
    # How its servers boot the OS image: virtual media through the BMC (the default),
    # UEFI HTTP boot of the image URL, or PXE from the operator's boot network (iPXE
    # chained to the control plane, docs/operations.md).
    boot: str = Field(default="virtual_media", pattern=r"^(virtual_media|uefi_http|pxe)$")
    # What a deploy puts on the system disk: the image's installer, booted as above
    # (`installer`), or the image itself, written by the deploy ramdisk (`image`: the
    # ramdisk checks the image's SHA-256, writes it and reads it back; the server then
    # boots from disk with its config drive; docs/operations.md, "Image-based deploys").
    deploy: str = Field(default="installer", pattern=r"^(installer|image)$")
    # The data disk as the installed system's kernel names it (cloud-init formats it and
    # mounts it at /data): NVMe on the catalog's servers, virtio (/dev/vdb) in the lab.
    data_disk_device: str = Field(default="/dev/nvme1n1", pattern=r"^/dev/[a-z0-9]+$")
    # The GPU backend the installed system's agent runs (its config drive says):
    # auto (NVML, then npu-smi), or simulated where there is no GPU (the lab's VMs: the
    # agent then reports its figures as simulated).
    agent_backend: str = Field(default="auto", pattern=r"^(auto|nvml|npu-smi|simulated)$")
    # A NIC on the cluster fabric that no DHCP serves (the lab's eth1, an isolated virtual
    # network): the config drive of a node on a fabric brings it up (its IPv6 link-local
    # address). None: the fabric is configured as the operator's own network does it.
    fabric_nic: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9]{0,14}$")
    # Its own support clocks; None: the catalog's [support].
    support: SupportTerms | None = None

    def priced_at(self, at: datetime) -> Offer:
        """This offer at the prices in effect at `at`."""
        change = _due(self.price_changes, at)
        if change is None:
            return self
        assert change.monthly_price is not None
        listed = change.list_monthly_price or self.list_monthly_price
        return self.model_copy(update={
            "monthly_price": change.monthly_price,
            "list_monthly_price": listed if listed and listed >= change.monthly_price
            else None})

    @property
    def id(self) -> str:
        return f"{self.sku}@{self.region}"

    @property
    def disk_gb(self) -> Decimal:
        """The server's local disks together, in GB (decimal, as sold)."""
        return sum((d.count * d.size_tb * 1000 for d in self.disks), Decimal(0))

    @property
    def list_price(self) -> Decimal:
        return self.list_monthly_price if self.list_monthly_price is not None else (
            self.monthly_price
        )

    @property
    def discount_percent(self) -> Decimal:
        return to_fen((1 - self.monthly_price / self.list_price) * 100)

    @model_validator(mode="after")
    def _list_not_below_price(self) -> Offer:
        if self.list_monthly_price is not None and self.list_monthly_price < self.monthly_price:
            raise ValueError("list_monthly_price must not be below monthly_price")
        _check_changes(self.price_changes, "monthly_price")
        return self


class Image(_Entry):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    name: str
    os: str
    gpu_vendor: str = Field(pattern=r"^(nvidia|huawei|any)$")
    software: tuple[str, ...] = ()
    url: str | None = None
    checksum: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    custom: bool = False


@dataclass(frozen=True)
class ContainerShare:
    cpus: Decimal
    memory_gb: int
    pids: int


class ContainerOffer(_Entry):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    gpu: str
    region: str
    host_sku: str
    price_per_gpu_hour: Money = Field(gt=0)
    max_gpus: int = Field(gt=0, le=16)
    default_image: str
    price_changes: tuple[PriceChange, ...] = ()
    # A container's share of its host per GPU: CPUs and memory default to the host offer's
    # (cores and memory divided by the SKU's GPU count); pids is a fork-bomb stop.
    cpus_per_gpu: Decimal | None = Field(default=None, gt=0)
    memory_gb_per_gpu: int | None = Field(default=None, gt=0)
    pids_per_gpu: int = Field(default=4096, gt=0)

    def priced_at(self, at: datetime) -> ContainerOffer:
        change = _due(self.price_changes, at)
        if change is None:
            return self
        return self.model_copy(update={"price_per_gpu_hour": change.price_per_gpu_hour})

    @model_validator(mode="after")
    def _changes_in_order(self) -> ContainerOffer:
        _check_changes(self.price_changes, "price_per_gpu_hour")
        return self


class PricingRules(_Entry):
    """Day and year prices are derived from the monthly one: day = month / 30 * day_factor,
    year = month * 12 * year_factor. Shown to the tenant as such."""

    day_factor: Decimal = Field(default=Decimal("1.3"), gt=0)
    year_factor: Decimal = Field(default=Decimal("0.85"), gt=0)
    note: str = "day = month ÷ 30 × 1.3; year = month × 12 × 0.85"
    # Prices in the catalog include VAT (含税价) at this rate; quotes and invoices show it.
    vat_rate: Decimal = Field(default=Decimal("0.06"), ge=0, lt=1)
    prices_include_vat: bool = True
    # Ending a term early: the unused whole periods are refunded less this share.
    early_termination_fee_percent: Decimal = Field(default=Decimal("20"), ge=0, le=100)


class AddOn(_Entry):
    """A fee beyond the server price, itemized in every quote and invoice."""

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    name: str
    # gb-month-stored: metered from what is stored (object storage), not ordered
    unit: str = Field(pattern=r"^(mbps-month|gb-month|gb-month-stored|gb|month)$")
    price: Money = Field(gt=0)
    note: str = ""
    example: bool = False


class Catalog(_Entry):
    source: str = ""
    pricing: PricingRules = PricingRules()
    support: SupportTerms = SupportTerms()  # every offer's, unless the offer sets its own

    def support_for(self, sku: str | None, region: str | None) -> SupportTerms:
        offer = self.offer(sku, region) if sku and region else None
        return offer.support if offer is not None and offer.support else self.support
    regions: tuple[Region, ...]
    gpus: tuple[Gpu, ...]
    skus: tuple[Sku, ...]
    offers: tuple[Offer, ...]
    images: tuple[Image, ...]
    container_offers: tuple[ContainerOffer, ...] = ()
    addons: tuple[AddOn, ...] = ()
    sites: tuple[Site, ...] = ()

    @cached_property
    def regions_by_site(self) -> dict[str, tuple[str, ...]]:
        """Each site's regions; a region without a declared site is a site of its own."""
        found: dict[str, list[str]] = {s.id: [] for s in self.sites}
        for r in self.regions:
            found.setdefault(r.site_id, []).append(r.id)
        return {site: tuple(regions) for site, regions in found.items()}

    def site_of(self, region: str) -> str:
        """The site a region belongs to (a region the catalog lost: its own id)."""
        known = self.region_by_id.get(region)
        return known.site_id if known is not None else region

    def site_entry(self, region: str) -> Site | None:
        """The declared [[sites]] entry of the region's site (None: a site of its own)."""
        return next((s for s in self.sites if s.id == self.site_of(region)), None)

    def media_base_url_of(self, region: str) -> str | None:
        """The media server of the region's site, if the site names one."""
        site = self.site_entry(region)
        return site.media_base_url if site is not None else None

    @cached_property
    def addon_by_id(self) -> dict[str, AddOn]:
        return {a.id: a for a in self.addons}

    @cached_property
    def region_by_id(self) -> dict[str, Region]:
        return {r.id: r for r in self.regions}

    @cached_property
    def gpu_by_id(self) -> dict[str, Gpu]:
        return {g.id: g for g in self.gpus}

    @cached_property
    def sku_by_id(self) -> dict[str, Sku]:
        return {s.id: s for s in self.skus}

    @cached_property
    def offer_by_id(self) -> dict[str, Offer]:
        return {o.id: o for o in self.offers}

    @cached_property
    def image_by_id(self) -> dict[str, Image]:
        return {i.id: i for i in self.images}

    @cached_property
    def container_offer_by_id(self) -> dict[str, ContainerOffer]:
        return {c.id: c for c in self.container_offers}

    def priced_at(self, at: datetime) -> Catalog:
        """The catalog at the prices in effect at `at` (the same catalog when no change is
        due); built without re-validation, with fresh lookups."""
        offers = tuple(o.priced_at(at) for o in self.offers)
        containers = tuple(c.priced_at(at) for c in self.container_offers)
        if all(a is b for a, b in zip(offers, self.offers, strict=True)) and all(
                a is b for a, b in zip(containers, self.container_offers, strict=True)):
            return self
        return self.replaced(offers=offers, container_offers=containers)

    def replaced(self, **changes: Any) -> Catalog:
        """This catalog with `changes` (entries already checked), built without
        re-validation and with fresh lookups (a copy would keep the cached ones)."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return Catalog.model_construct(**{**fields, **changes})

    def container_share(self, offer_id: str, gpus: int) -> ContainerShare:
        """What a container of `gpus` GPUs of a container offer may use of its host."""
        co = self.container_offer_by_id[offer_id]
        cpus, memory = co.cpus_per_gpu, co.memory_gb_per_gpu
        if cpus is None or memory is None:  # the host offer's share (checked at load)
            host = self.offer(co.host_sku, co.region)
            assert host is not None
            per_gpu = self.sku_by_id[co.host_sku].gpu_count
            cpus = cpus if cpus is not None else Decimal(host.cpu_logical_cores) / per_gpu
            memory = memory if memory is not None else host.memory_gb // per_gpu
        return ContainerShare(cpus=cpus * gpus, memory_gb=memory * gpus,
                              pids=co.pids_per_gpu * gpus)

    def offer(self, sku: str, region: str) -> Offer | None:
        return self.offer_by_id.get(f"{sku}@{region}")

    def gpu_of(self, offer: Offer) -> Gpu:
        return self.gpu_by_id[self.sku_by_id[offer.sku].gpu]

    def marks(self, sku: str, region: str) -> tuple[Thresholds, GpuSpec] | None:
        """The acceptance marks of a node's offer; None when the catalog lost the offer."""
        offer = self.offer(sku, region)
        return self.acceptance_for(offer) if offer is not None else None

    def acceptance_for(self, offer: Offer) -> tuple[Thresholds, GpuSpec]:
        """The acceptance suite's pass marks and the promised GPU figures for an offer:
        defaults, then the SKU's marks, then the offer's."""
        marks: dict[str, float] = {}
        for layer in (self.sku_by_id[offer.sku].acceptance, offer.acceptance):
            marks.update({k: float(v) for k, v in layer.model_dump().items() if v is not None})
        gpu = self.gpu_of(offer)
        ceiling = gpu.measured_bf16_matmul_tflops or gpu.bf16_dense_tflops * Decimal("0.8")
        spec = GpuSpec(name=gpu.name, bf16_dense_tflops=float(gpu.bf16_dense_tflops),
                       matmul_ceiling_tflops=float(ceiling),
                       memory_bandwidth_gbps=float(gpu.memory_bandwidth_tbps) * 1000,
                       pcie_gen=gpu.pcie_gen, gpu_id=gpu.id,
                       count=self.sku_by_id[offer.sku].gpu_count)
        return Thresholds(**marks), spec


def _where(section: str, index: int, entry: dict[str, Any]) -> str:
    name = entry.get("id") or (
        f"{entry.get('sku')}@{entry.get('region')}" if "sku" in entry else None
    )
    return f"[[{section}]] #{index + 1}" + (f" ({name})" if name else "")


def _check_references(catalog: Catalog, where: str) -> None:
    problems: list[str] = []

    def unique(section: str, ids: list[str]) -> None:
        seen: set[str] = set()
        for i in ids:
            if i in seen:
                problems.append(f"[[{section}]]: id {i!r} appears twice")
            seen.add(i)

    unique("regions", [r.id for r in catalog.regions])
    unique("sites", [s.id for s in catalog.sites])
    sites = {s.id for s in catalog.sites}
    for n, region in enumerate(catalog.regions):
        if region.site is not None and region.site not in sites:
            problems.append(f"[[regions]] #{n + 1} ({region.id}): field 'site': unknown "
                            f"site {region.site!r}; declare it under [[sites]]")
    unique("gpus", [g.id for g in catalog.gpus])
    unique("skus", [s.id for s in catalog.skus])
    unique("offers", [o.id for o in catalog.offers])
    unique("images", [i.id for i in catalog.images])
    unique("container_offers", [c.id for c in catalog.container_offers])
    for n, sku in enumerate(catalog.skus):
        if sku.gpu not in catalog.gpu_by_id:
            problems.append(f"[[skus]] #{n + 1} ({sku.id}): field 'gpu': unknown GPU {sku.gpu!r}")
    for n, offer in enumerate(catalog.offers):
        at = f"[[offers]] #{n + 1} ({offer.id})"
        if offer.sku not in catalog.sku_by_id:
            problems.append(f"{at}: field 'sku': unknown SKU {offer.sku!r}")
        if offer.region not in catalog.region_by_id:
            problems.append(f"{at}: field 'region': unknown region {offer.region!r}")
        if offer.default_image not in catalog.image_by_id:
            problems.append(f"{at}: field 'default_image': unknown image {offer.default_image!r}")
    for n, c in enumerate(catalog.container_offers):
        at = f"[[container_offers]] #{n + 1} ({c.id})"
        if c.gpu not in catalog.gpu_by_id:
            problems.append(f"{at}: field 'gpu': unknown GPU {c.gpu!r}")
        if c.region not in catalog.region_by_id:
            problems.append(f"{at}: field 'region': unknown region {c.region!r}")
        if c.host_sku not in catalog.sku_by_id:
            problems.append(f"{at}: field 'host_sku': unknown SKU {c.host_sku!r}")
        if c.default_image not in catalog.image_by_id:
            problems.append(f"{at}: field 'default_image': unknown image {c.default_image!r}")
        if catalog.offer(c.host_sku, c.region) is None and (
                c.cpus_per_gpu is None or c.memory_gb_per_gpu is None):
            problems.append(f"{at}: no [[offers]] entry for {c.host_sku} in {c.region} to "
                            "take the host's cores and memory from; set cpus_per_gpu and "
                            "memory_gb_per_gpu")
    for n, image in enumerate(catalog.images):
        if image.custom and not (image.url and image.checksum):
            problems.append(
                f"[[images]] #{n + 1} ({image.id}): a custom image needs 'url' and 'checksum'"
            )
    if problems:
        raise CatalogError(f"{where}: " + "; ".join(problems))


def parse_catalog(data: dict[str, Any], where: str = "<catalog>") -> Catalog:
    """Validate a parsed catalog document; errors name `where`, the entry and the field."""
    for section in ("regions", "gpus", "skus", "offers", "images"):
        if section not in data:
            raise CatalogError(f"{where}: missing section [[{section}]]")
    try:
        catalog = Catalog.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = list(err["loc"])
            section = str(loc[0]) if loc else ""
            if len(loc) >= 2 and isinstance(loc[1], int) and isinstance(data.get(section), list):
                entry = data[section][loc[1]]
                head = _where(section, loc[1], entry if isinstance(entry, dict) else {})
                field = ".".join(str(p) for p in loc[2:]) or "(entry)"
            else:
                head, field = "top level", ".".join(str(p) for p in loc)
            lines.append(f"{head}: field '{field}': {err['msg']}")
        raise CatalogError(f"{where}: " + "; ".join(lines)) from None
    _check_references(catalog, where)
    return catalog


def read_catalog_text(path: Path | None = None) -> str:
    path = path or DEFAULT_CATALOG
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read catalog file: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not valid TOML: {exc}") from None


def catalog_from_text(text: str, where: str) -> Catalog:
    """A catalog from its TOML text; errors in one line naming `where`, entry and field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{where}: not valid TOML: {exc}") from None
    data.setdefault("source", where)
    return parse_catalog(data, where)


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or DEFAULT_CATALOG
    return catalog_from_text(read_catalog_text(path), str(path))
