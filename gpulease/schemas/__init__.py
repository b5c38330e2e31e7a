"""Request and response shapes of the REST API (also used by the CLI's client)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import cache
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress

from gpulease.domain.billing.money import Money
from gpulease.schemas.text import Lines, OneLine, PlainNumber

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@cache
def _field_names(cls: type[BaseModel]) -> tuple[str, ...]:
    return tuple(cls.model_fields)


def trusted(cls: type[M], **values: Any) -> M:
    """A view made from values that already have their fields' types (read from typed
    columns), every field given: neither validated nor walked field by field as
    `model_construct` does (about half of what building a page's fifty views cost, in a
    profile). tests/api/test_list_queries.py reads such views back through validation."""
    fields = _field_names(cls)
    if len(values) != len(fields):
        raise TypeError(f"{cls.__name__} takes {sorted(fields)}; given {sorted(values)}")
    view = cls.__new__(cls)
    # in the fields' order, as validation would put them (the JSON and its ETag follow it);
    # a field not given is a KeyError here rather than a view missing it
    object.__setattr__(view, "__dict__", {name: values[name] for name in fields})
    object.__setattr__(view, "__pydantic_fields_set__", set(fields))
    object.__setattr__(view, "__pydantic_extra__", None)
    object.__setattr__(view, "__pydantic_private__", None)
    return view


class Page(BaseModel, Generic[T]):
    """Every list the API answers: one page of `items`, the whole list's `total`, and the
    `limit` and `offset` it was asked with (docs/api.md, Pagination)."""

    items: list[T]
    total: int
    limit: int
    offset: int

    @classmethod
    def of(cls, listed: Sequence[T], limit: int, offset: int) -> Page[T]:
        """The page of a list read whole (a short one: sites, racks, an instance's
        backups)."""
        return cls(items=list(listed[offset:offset + limit]), total=len(listed), limit=limit,
                   offset=offset)


class Problem(BaseModel):
    """Every error answer (application/problem+json, RFC 9457): a sentence that says what
    to do; for invalid input the field and what it accepts."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    field: str | None = None
    accepted: list[str] | None = None
    missing: str | None = Field(default=None, description="402: the amount short, CNY")
    retry_after: int | None = Field(default=None, description="503: seconds to wait")


class PriceChangeView(BaseModel):
    effective_from: date
    monthly_price: Money


class SupportClocksView(BaseModel):
    """The support an offer comes with, by ticket severity (P1, P2, P3): minutes to the
    first response, hours to mitigation (served again) and to resolution; a severity left
    out has no such clock."""

    response_minutes: dict[str, Decimal]
    mitigation_hours: dict[str, Decimal]
    resolution_hours: dict[str, Decimal]


class OfferView(BaseModel):
    id: str
    sku: str
    region: str
    region_name_zh: str
    region_name_en: str
    gpu: str
    gpu_count: int
    gpu_memory_gb: int
    gpu_interconnect: str
    advertised_interconnect: str | None
    nvlink: bool
    infiniband: bool
    network: str
    cpu: str
    memory: str
    disks: str
    monthly_price: Money
    list_monthly_price: Money
    discount_percent: Decimal
    day_price: Money
    year_price: Money
    stock: int
    default_image: str
    example: bool
    price_changes: list[PriceChangeView] = Field(
        default_factory=list, description="announced monthly prices ahead, by date")
    support: SupportClocksView | None = Field(
        default=None, description="the support clocks a ticket about this server runs on")


class ContainerOfferView(BaseModel):
    id: str
    gpu: str
    region: str
    price_per_gpu_hour: Money
    max_gpus: int
    free_gpus: int
    default_image: str
    # What each GPU brings of the host: the container's limits are these times its GPUs.
    cpus_per_gpu: Decimal
    memory_gb_per_gpu: int
    pids_per_gpu: int


class CatalogView(BaseModel):
    currency: Literal["CNY"] = "CNY"
    pricing_rule: str
    offers: list[OfferView]
    container_offers: list[ContainerOfferView]
    # the published catalog version these prices come from (None: the process's file)
    version: int | None = None


class ImageView(BaseModel):
    id: str
    name: str
    os: str
    gpu_vendor: str
    software: list[str]
    custom: bool
    url: str | None = None
    checksum: str | None = None


class ImageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,98}$")
    name: str = Field(min_length=1, max_length=200)
    os: str = Field(min_length=1, max_length=200)
    gpu_vendor: Literal["nvidia", "huawei", "any"]
    url: str = Field(pattern=r"^https?://\S+$", max_length=2000)
    checksum: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    software: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list,
                                                                  max_length=100)


class OrderRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["bare_metal", "cluster", "container"] = "bare_metal"
    sku: str | None = Field(default=None, max_length=100,
                            description="bare metal / cluster: SKU id")
    region: str | None = Field(default=None, max_length=100)
    offer: str | None = Field(default=None, max_length=100,
                              description="container: container offer id")
    term: str | None = Field(default=None, max_length=16,
                             description="day, month or year; hour for containers")
    image: str | None = Field(default=None, max_length=100,
                              description="OS image id; the offer's default if empty")
    nodes: int = Field(default=1, ge=1, le=1024, description="cluster: node count")
    gpus: int | None = Field(default=None, ge=1, le=64, description="container: GPU count")
    ssh_keys: list[Annotated[str, Field(max_length=16384)]] = Field(default_factory=list,
                                                                     max_length=32)
    name: Annotated[str | None, OneLine] = Field(default=None, max_length=100)
    ssh_password: bool = Field(
        default=False,
        description="container: also let root log in over SSH with the password shown once "
                    "(off by default: SSH keys only); bare metal takes keys only")
    encrypted_data: bool = Field(default=False, description=(
        "bare metal / cluster: leave the data disk unformatted, for LUKS2 under a key only "
        "you hold (`gpulease agent encrypt-data` on the server); destroyed first at release"))
    restore: str | None = Field(default=None, max_length=100, description=(
        "bare metal: a snapshot of yours (`gpulease backups INSTANCE`; SNAPSHOT, or "
        "INSTANCE/SNAPSHOT) restored onto the server's data disk at delivery, verified"))
    add: dict[Annotated[str, Field(max_length=64)],
              Annotated[Decimal, PlainNumber,
                        Field(gt=0, max_digits=12, decimal_places=3)]] = Field(
        default_factory=dict, max_length=10, description=(
            "bare metal / cluster: add-ons charged per period with the lease: "
            "public-bandwidth (Mbps), extra-storage (GB), support-standard / "
            "support-premium (1); the hold covers their first period"))


class StageView(BaseModel):
    stage: str
    at: datetime
    node: str | None = None
    message: str | None = None
    # the message as a phrase (JSON), for the console to say in its reader's language
    phrase: str | None = Field(default=None, exclude=True)


class InstanceNodeView(BaseModel):
    id: str
    name: str
    status: str
    stage: str | None
    ip_address: str | None
    gpus: list[int]
    ssh_command: str | None = None  # each server of a cluster, where its SSH is


class InstanceView(BaseModel):
    id: str
    tenant_id: str
    name: str | None
    kind: str
    status: str
    status_reason: str | None
    status_phrase: str | None = Field(default=None, exclude=True)  # the reason, for the console
    stage: str | None
    sku: str
    region: str
    container_offer: str | None
    term: str
    image: str
    node_count: int
    gpu_count: int
    fabric_id: str | None
    nodes: list[InstanceNodeView]
    ip_address: str | None
    ssh_command: str | None
    ordered_at: datetime
    ready_at: datetime | None
    released_at: datetime | None
    delivery_seconds: float | None
    delivery_sla_seconds: float
    stages: list[StageView]
    credentials_available: bool
    simulated: bool
    ssh_password: bool = False  # root may log in over SSH with the password (containers)


class CredentialsView(BaseModel):
    instance_id: str
    username: str = "root"
    root_password: str
    ip_address: str | None
    ssh_command: str | None
    note: str = "Shown once. Store it now; it cannot be shown again."


class NodeView(BaseModel):
    id: str
    name: str
    sku: str
    region: str
    pool: str
    serial: str
    status: str
    status_reason: str | None
    stage: str | None
    rack: str | None
    fabric: str | None
    leaf_switch: str | None
    bmc_driver: str
    bmc_address: str
    instance_id: str | None
    gpu_count: int
    free_gpus: int
    drain_requested: bool
    simulated: bool
    agent: str = "builtin"  # builtin (simulated stand-in) | gpulease (the node agent)
    runtime: str | None = None  # a shared server's Docker engine URL
    boot_address: str | None = None  # network boot: the only address served its script
    ssh_endpoint: str | None = None  # HOST:PORT tenants reach its SSH at (NAT, a forward)
    # it may hold a tenant's data since then, with no certified erase after: it cannot
    # join the pool until erased (`node resume` erases it first)
    erase_due_since: datetime | None = None
    last_error: str | None
    updated_at: datetime
    inventory: dict[str, Any] | None = None
    # The node agent's own report (one node's detail only): hostname, last call, and its
    # inventory (GPUs with PCIe and NVLink, CPUs, memory, disks, NICs, driver, CUDA).
    agent_report: dict[str, Any] | None = None


class EnrollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bmc: str = Field(description="Redfish URL, e.g. https://10.0.0.5/redfish/v1/Systems/1",
                     max_length=300)
    username: str = Field(min_length=1, max_length=100)
    password: str = Field(min_length=1, max_length=200)
    offer: str | None = Field(default=None, max_length=200,
                              description="expected offer, SKU@region")
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    fabric: str | None = Field(default=None, max_length=64)
    rack: str | None = Field(default=None, max_length=64)
    pool: Literal["bare_metal", "container"] = "bare_metal"
    runtime: str | None = Field(
        default=None, max_length=300, pattern=r"^(unix|tcp|ssh)://\S+$",
        description="a shared (container) server's Docker engine: unix:///var/run/docker.sock, "
        "tcp://10.0.0.5:2376 or ssh://root@10.0.0.5")
    agent: Literal["gpulease", "builtin"] = Field(
        default="gpulease", description="gpulease: the node agent runs on the server and is "
        "driven by commands; builtin: a simulated stand-in (demo and test servers only)")
    boot_address: IPvAnyAddress | None = Field(
        default=None, description="network boot (PXE): the address the server's boot NIC "
        "gets from your DHCP; its iPXE script and NoCloud seed answer only there")
    ssh_endpoint: str | None = Field(
        default=None, max_length=300,
        pattern=r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
        description="HOST:PORT where tenants reach the server's SSH when it sits behind NAT "
        "or a port forward (e.g. ssh.example.com:22001; the lab's 127.0.0.1:2201); default: "
        "the address its agent reports, port 22")


class NodeActionRequest(BaseModel):
    reason: Annotated[str | None, Lines] = Field(default=None, max_length=500)


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, OneLine] = Field(min_length=1, max_length=200)
    admin_email: Annotated[str, OneLine] = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    admin_name: Annotated[str, OneLine] = Field(min_length=1, max_length=200)


class MeterCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="the metering source, e.g. netflow-sichuan-2")
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class MeterCreated(BaseModel):
    meter: UserView
    token: TokenCreated

    def without_secrets(self) -> MeterCreated:
        return self.model_copy(update={"token": self.token.without_secrets()})


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: Annotated[str, OneLine] = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    name: Annotated[str, OneLine] = Field(min_length=1, max_length=200)
    role: Literal["admin", "member", "reader"]
    password: str | None = Field(default=None, min_length=12, max_length=200)


class PasswordSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: str = Field(max_length=200, description="at least 12 characters")
    current_password: str | None = Field(default=None, max_length=200, description=(
        "the password now; needed once one is set"))


class PasswordResetAsk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str = Field(max_length=254, description="the account's e-mail")


class PasswordResetComplete(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(max_length=200, description="from the mailed link: rst_…")
    password: str = Field(max_length=200, description="at least 12 characters")


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, OneLine] = Field(default="cli", min_length=1, max_length=200)
    user_id: str | None = Field(default=None, max_length=32)
    expires_in_days: int | None = Field(default=90, ge=1, le=3650)


class AuditEntryView(BaseModel):
    seq: int
    at: datetime
    request_id: str | None
    user_id: str | None
    token_id: str | None
    role: str | None
    tenant_id: str | None
    source: str | None
    action: str
    target: str | None
    outcome: int


class AuditVerdict(BaseModel):
    intact: bool
    checked: int
    first_seq: int
    last_seq: int
    problem: str | None = None


class TenantView(BaseModel):
    id: str
    name: str
    created_at: datetime


class TenantSummary(BaseModel):
    """A tenant in the operator's list."""

    id: str
    name: str
    status: str  # active | suspended | closed
    status_reason: str | None
    created_at: datetime
    users: int
    live_instances: int
    balance: Decimal


class LocaleSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    locale: str | None = Field(max_length=16, description="zh_CN or en (zh-CN accepted); "
                               "null: the browser's Accept-Language")


class UserView(BaseModel):
    id: str
    tenant_id: str | None
    email: str
    name: str
    role: str
    disabled_at: datetime | None = None
    has_password: bool = False
    locale: str | None = Field(default=None, description="the console's and the user's mail "
                               "language (zh_CN, en); null: the browser's")


class TokenView(BaseModel):
    id: str
    name: str
    prefix: str
    user_id: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenView):
    token: str | None = Field(description="the secret: in the answer that created it, "
                                          "never again (a replay answers without it)")
    note: str = "Shown once. Store it now; only its hash is kept."

    def secret(self) -> str:
        """The token of a fresh answer (a replayed one does not carry it)."""
        if self.token is None:
            raise ValueError("this answer repeats a creation: its token was shown once")
        return self.token

    def without_secrets(self) -> TokenCreated:
        return self.model_copy(update={
            "token": None, "note": "The token was shown once, when it was created; this "
                                   "answer repeats that request without it."})


class TenantCreated(BaseModel):
    tenant: TenantView
    admin: UserView
    token: TokenCreated

    def without_secrets(self) -> TenantCreated:
        return self.model_copy(update={"token": self.token.without_secrets()})


class WorkerView(BaseModel):
    owner: str
    host: str
    pid: int
    version: str
    threads: int
    started_at: datetime
    seen_at: datetime
    claims: int
    stopped_at: datetime | None
    state: str = Field(description="alive (seen within three heartbeats), dead, or stopped")
    site: str | None = Field(default=None, description="the site whose servers it serves; "
                             "null: every site that has never had a worker of its own")


class IdleShare(BaseModel):
    idle_pct: float | None = Field(description="share of the time seen with utilisation "
                                   "under the threshold, in %; null: no telemetry")
    seen_s: float = Field(description="seconds of telemetry in the span")


class GpuIdleView(BaseModel):
    index: int
    hour: IdleShare
    day: IdleShare


class IdleView(BaseModel):
    instance_id: str
    name: str | None
    kind: str
    gpus: int
    threshold_pct: float = Field(description="utilisation under this is idle "
                                 "(GPULEASE_IDLE_UTIL_PCT)")
    hour: IdleShare = Field(description="the last hour, all its GPUs together")
    day: IdleShare = Field(description="the last 24 hours, all its GPUs together")
    per_gpu: list[GpuIdleView]


class GpuQuotaRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_gpus: int = Field(ge=0, le=100_000, description="GPUs the tenant may hold at once")
    reason: str | None = Field(default=None, max_length=500)


class GpuQuotaView(BaseModel):
    tenant_id: str
    offer: str = Field(description="'*' (all GPUs) or an offer, sku@region")
    max_gpus: int
    held: int = Field(description="GPUs the tenant holds now under it")
    reason: str | None
    set_by: str
    set_at: datetime


class SiteView(BaseModel):
    id: str
    name_zh: str
    name_en: str
    regions: list[str]
    own_workers: bool = Field(description="whether the site has ever had a worker of its "
                              "own (then only those serve it)")
    live_workers: int = Field(description="live workers serving it now")
    served: bool = Field(description="false: it has workers of its own and none is alive, "
                         "so orders for its regions are refused (503)")


class NodeEventView(BaseModel):
    at: datetime
    kind: str = Field(description="status | stage | error | result | note | bmc_alert …")
    from_value: str | None
    to_value: str | None
    message: str | None
    actor: str | None
    instance_id: str | None
    phrase: str | None = Field(default=None, exclude=True)  # the message, for the console


class FleetCount(BaseModel):
    region: str
    rack: str | None
    fabric: str | None
    status: str
    nodes: int
