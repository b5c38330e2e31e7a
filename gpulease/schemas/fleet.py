"""The fleet's managed objects as the API sees them: fabrics, racks, and changes to a node."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


@dataclass(frozen=True)
class NodeFilter:
    """Which nodes an operator lists: by status (deleted ones only when asked for), region,
    SKU, fabric or rack."""

    status: str | None = None
    region: str | None = None
    sku: str | None = None
    fabric: str | None = None
    rack: str | None = None


class FabricCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN, description="e.g. ib-ningxia-1")
    region: str = Field(min_length=1, max_length=64)
    kind: Literal["infiniband", "roce"] = "infiniband"
    rate_gbps: int = Field(default=400, ge=1, le=3200,
                           description="per-port line rate, e.g. 200 (HDR), 400 (NDR)")


class FabricUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["infiniband", "roce"] | None = None
    rate_gbps: int | None = Field(default=None, ge=1, le=3200)


class FabricView(BaseModel):
    id: str
    region: str
    kind: str
    rate_gbps: int
    racks: int
    nodes: int


class RackCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN, description="e.g. ningxia-1-r07")
    region: str = Field(min_length=1, max_length=64)
    zone: str = Field(min_length=1, max_length=64, description="room or hall")
    fabric: str | None = Field(default=None, max_length=64)
    leaf_switch: str | None = Field(default=None, max_length=64)


class RackUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    zone: str | None = Field(default=None, min_length=1, max_length=64)
    fabric: str | None = Field(default=None, max_length=64,
                               description="a fabric id; an empty string takes it off one")
    leaf_switch: str | None = Field(default=None, max_length=64)


class RackView(BaseModel):
    id: str
    region: str
    zone: str
    fabric: str | None
    leaf_switch: str | None
    nodes: int


class NodeUpdate(BaseModel):
    """Fields left out are kept; an empty rack or fabric takes the node off it."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    rack: str | None = Field(default=None, max_length=64)
    fabric: str | None = Field(default=None, max_length=64)
    bmc_username: str | None = Field(default=None, min_length=1, max_length=100)
    bmc_password: str | None = Field(default=None, min_length=1, max_length=200)
    verify: bool = Field(default=True, description="new BMC credentials are tried on the BMC "
                         "before they are stored")


class CatalogReload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(default=None, max_length=1_000_000, description=(
        "a catalog's TOML text; left out, the server publishes its own catalog file"))


class CatalogVersionView(BaseModel):
    id: int
    digest: str  # SHA-256 of the TOML text
    source: str
    published_at: datetime
    published_by: str
    this_process: int | None  # the version the answering process prices from


class BreakerView(BaseModel):
    status: str  # closed | open
    reason: str | None
    opened_at: datetime | None
    held_deploys: int  # deploys held for a retry instead of going to maintenance


class NodeFaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    faults: list[str] = Field(max_length=16, description=(
        "KIND[:GPU[:NUMBER]] with KIND one of thermal, xid79, xid (xid:GPU:NUMBER, e.g. "
        "xid:3:94), nvlink-down, slow-gpu, ecc-dbe, row-remap, …; an empty list clears them"))


class RepairStart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=2000)
    ticket: str | None = Field(default=None, max_length=32)


class RepairDone(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parts: str = Field(min_length=1, max_length=4000, description=(
        "what was replaced, with serials, e.g. \"GPU 3: 1652200012 → 1652200087\""))


class RepairView(BaseModel):
    id: int
    node: str
    offer: str
    ticket_id: str | None
    reason: str
    parts: str | None
    started_at: datetime
    finished_at: datetime | None
    hours: float | None  # time to repair, once finished
    instance_id: str | None = None  # a card repair: the instance it returns to
    burned_in_at: datetime | None = None  # its burn-in and acceptance passed


class StorageKeyView(BaseModel):
    access_key_id: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class StorageView(BaseModel):
    endpoint: str
    region: str
    bucket: str
    used_bytes: int
    quota_bytes: int
    free_bytes: int = Field(description="stored free of charge; beyond it, GB-days")
    price_per_gb_month: Decimal | None = Field(
        description="the catalog's object-storage price beyond the free bytes (as the "
                    "price book writes it)")
    keys: list[StorageKeyView]
    writes_blocked: bool = Field(default=False, description=(
        "past its quota: the store refuses writes with the tenant's keys (reads and "
        "deletes go on) until it is under again"))


class StorageQuota(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quota_gb: float | None = Field(gt=0, le=10**7, description=(
        "the bucket's quota in GB (10^9 bytes); null: the platform's default"))


class StorageKeyCreated(BaseModel):
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str  # shown once: the platform does not keep it


class BackupTarget(BaseModel):
    """An S3 bucket of the tenant's own, elsewhere (instead of the platform's)."""

    model_config = ConfigDict(extra="forbid")
    endpoint: str = Field(max_length=500, description="https://… of a public S3 service")
    bucket: str = Field(min_length=3, max_length=63)
    access_key_id: str = Field(min_length=1, max_length=128)
    secret_access_key: str = Field(min_length=1, max_length=256)
    prefix: str = Field(default="", max_length=200, description="where in the bucket")


class BackupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(default="/data/checkpoints", max_length=1024,
                      description="a directory on the server's data disk (/data/…)")
    max_mbps: float | None = Field(default=None, gt=0, le=100_000,
                                   description="bandwidth cap in MB/s")
    target: BackupTarget | None = Field(default=None, description=(
        "your own S3 (its endpoint must pass the platform's egress guard: a public "
        "address); default: your bucket on the platform"))


class RestoreRequest(BackupRequest):
    snapshot_id: str = Field(min_length=1, max_length=100, description=(
        "a snapshot of yours (`gpulease backups`): SNAPSHOT, or INSTANCE/SNAPSHOT for one "
        "taken of another instance"))


class BackupView(BaseModel):
    id: str
    instance_id: str
    node: str
    kind: str  # backup | restore
    trigger: str
    path: str
    status: str
    status_reason: str | None
    snapshot_id: str | None
    files: int | None
    bytes_total: int | None
    bytes_moved: int | None
    seconds: float | None
    attempts: int
    requested_at: datetime
    finished_at: datetime | None
    target: str | None = None  # your own S3's endpoint/bucket (None: the platform's)


class BackupPolicyUpdate(BaseModel):
    """What changes (fields left out stay as they are)."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, max_length=1024,
                             description="the directory kept: on the data disk (/data/…)")
    every_hours: float | None = Field(default=None, ge=0, le=24 * 31, description=(
        "a backup every this many hours (at least 1); 0 turns the schedule off"))
    at_lease_end: bool | None = Field(default=None, description=(
        "back up when the lease lapses (at grace and before the erase); false opts out"))
    max_mbps: float | None = Field(default=None, ge=0, le=100_000,
                                   description="bandwidth cap in MB/s; 0 removes it")


class BackupPolicyView(BaseModel):
    instance_id: str
    path: str
    every_hours: float | None
    at_lease_end: bool
    max_mbps: float | None
    next_scheduled_at: datetime | None
    last_success_at: datetime | None
    last_snapshot_id: str | None
    last_failure: str | None  # the latest run's reason, when it failed


class SaveImageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=63, description=(
        "lower-case letters, digits, '.', '_', '-'; later orders name it my/NAME"))


class SavedImageView(BaseModel):
    id: str
    name: str
    order_as: str  # what an order's `image` names it: my/NAME
    source_instance_id: str
    base_image_id: str
    digest: str | None
    size_bytes: int | None
    status: str  # saving | ready | failed | deleted
    status_reason: str | None
    created_at: datetime
    saved_at: datetime | None


class PowerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["reboot", "power_cycle", "restart"] = Field(description=(
        "bare metal: `reboot` (the operating system restarts cleanly) or `power_cycle` (the "
        "server is reset at once, for a hung system); a container: `restart`"))
    node: str | None = Field(default=None, max_length=64, description=(
        "one server of a cluster by name (`gpulease show` lists them); all of them when "
        "left out"))


class PowerActionView(BaseModel):
    id: str
    instance_id: str
    action: str  # reboot | power_cycle | restart
    node: str | None  # None: every server of the instance
    status: str  # queued | done | failed
    status_reason: str | None
    sent_to: list[str]  # the servers (or the container's host) that accepted it
    requested_by: str
    requested_at: datetime
    finished_at: datetime | None
