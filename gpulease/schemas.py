"""Request and response shapes of the REST API (also used by the CLI's client)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from gpulease.domain.money import Money

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class PriceChangeView(BaseModel):
    effective_from: date
    monthly_price: Money


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


class ContainerOfferView(BaseModel):
    id: str
    gpu: str
    region: str
    price_per_gpu_hour: Money
    max_gpus: int
    free_gpus: int
    default_image: str


class CatalogView(BaseModel):
    currency: Literal["CNY"] = "CNY"
    pricing_rule: str
    offers: list[OfferView]
    container_offers: list[ContainerOfferView]


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
    name: str | None = Field(default=None, max_length=100)


class StageView(BaseModel):
    stage: str
    at: datetime
    node: str | None = None
    message: str | None = None


class InstanceNodeView(BaseModel):
    id: str
    name: str
    status: str
    stage: str | None
    ip_address: str | None
    gpus: list[int]


class InstanceView(BaseModel):
    id: str
    tenant_id: str
    name: str | None
    kind: str
    status: str
    status_reason: str | None
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


class NodeActionRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=500)


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    admin_email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    admin_name: str = Field(min_length=1, max_length=200)


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    name: str = Field(min_length=1, max_length=200)
    role: Literal["admin", "member", "reader"]
    password: str | None = Field(default=None, min_length=12, max_length=200)


class PasswordSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: str = Field(max_length=200, description="at least 12 characters")
    current_password: str | None = Field(default=None, max_length=200, description=(
        "the password now; needed once one is set"))


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="cli", min_length=1, max_length=200)
    user_id: str | None = Field(default=None, max_length=32)
    expires_in_days: int | None = Field(default=90, ge=1, le=3650)


class TenantView(BaseModel):
    id: str
    name: str
    created_at: datetime


class UserView(BaseModel):
    id: str
    tenant_id: str | None
    email: str
    name: str
    role: str
    disabled_at: datetime | None = None
    has_password: bool = False


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


# --- money -----------------------------------------------------------------------------

class WalletView(BaseModel):
    tenant_id: str
    balance: Money
    credit_limit: Money
    held: Money = Field(description="held by orders not yet delivered (part of the balance)")
    available: Money = Field(description="balance + credit limit: what the next order may hold")
    updated_at: datetime


class LedgerEntryView(BaseModel):
    id: int
    at: datetime
    kind: str
    amount: Money
    balance_after: Money
    reference: str | None
    instance_id: str | None


class TopUpRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: Decimal = Field(gt=0, max_digits=14, decimal_places=2,
                            description="yuan, at most two decimals")
    reference: str = Field(max_length=200, description="the payment's reference")


class CreditLimitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    credit_limit: Decimal = Field(ge=0, max_digits=14, decimal_places=2)


class QuoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str = Field(max_length=100)
    region: str = Field(max_length=100)
    term: str = Field(default="month", max_length=16)
    count: int = Field(default=1, ge=1, le=1200,
                       description="periods of the term (e.g. 3 months)")
    servers: int = Field(default=1, ge=1, le=1024, description="servers (a cluster's nodes)")
    add: dict[Annotated[str, Field(max_length=64)],
              Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=3)]] = Field(
        default_factory=dict, max_length=20, description=(
            "add-ons and quantities: public-bandwidth (Mbps), extra-storage (GB), "
            "egress (GB), support-standard / support-premium (1)"))
    days_per_week: Decimal | None = Field(default=None, ge=0, le=7, max_digits=4,
                                          decimal_places=2, description=(
        "optional usage pattern: also price it by the day and by the month"))


class QuoteLineView(BaseModel):
    item: str
    description: str
    unit: str
    quantity: Decimal
    unit_price: Money
    amount: Money
    example_price: bool


class BreakEvenView(BaseModel):
    days_per_week: Decimal
    by_day_per_month: Money
    by_month: Money
    cheaper: str
    break_even_days_per_month: Decimal


class QuoteView(BaseModel):
    sku: str
    region: str
    term: str
    count: int
    servers: int
    lines: list[QuoteLineView]
    total: Money
    net: Money
    vat: Money
    vat_rate: Decimal
    prices_include_vat: bool
    early_termination: str
    regions: list[dict[str, str]] = Field(description="every region offering the SKU, "
                                                     "cheapest monthly price first")
    break_even: BreakEvenView | None = None
    notes: list[str]


class LeaseView(BaseModel):
    instance_id: str
    term: str
    unit_price: Money = Field(description="per period, fixed when the lease started")
    periods: int
    starts_at: datetime = Field(description="delivery, not the order")
    ends_at: datetime
    grace_until: datetime | None
    status: str = Field(description="active | grace (expired, machine kept) | ended")
    auto_renew: bool
    grace_days: float
    reminders_sent: list[str]


class RenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    periods: int = Field(default=1, ge=1, le=36)
    term: str | None = Field(default=None, max_length=16,
                             description="switch between day and month terms")


class AutoRenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auto_renew: bool


class WebhookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(max_length=500)


class UsageIn(BaseModel):
    """One metered quantity reported by a metering source (network collector, storage)."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=128,
                     description="the reporter's idempotency key: the same key again is "
                                 "ignored")
    instance_id: str = Field(max_length=32)
    kind: Literal["gpu_hours", "egress_gb", "storage_gb_days"]
    quantity: Decimal = Field(gt=0, max_digits=18, decimal_places=6)
    started_at: AwareDatetime
    ended_at: AwareDatetime


class UsageBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: list[UsageIn] = Field(min_length=1, max_length=1000)


class UsageView(BaseModel):
    key: str
    instance_id: str | None
    kind: str
    quantity: Decimal
    unit: str
    unit_price: Decimal
    amount: Money
    started_at: datetime
    ended_at: datetime
    recorded_at: datetime
    source: str
    duplicate: bool = Field(False, description="true: this key was recorded before; ignored")


class InvoiceLineView(BaseModel):
    seq: int
    kind: str
    instance_id: str | None
    description: str
    quantity: Decimal | None
    unit: str | None
    unit_price: Decimal | None
    service_from: datetime | None
    service_to: datetime | None
    entries: int
    net: Money
    vat: Money
    gross: Money


class InvoiceView(BaseModel):
    id: str
    tenant_id: str
    tenant_name: str
    kind: Literal["invoice", "credit_note"]
    period: str
    status: Literal["draft", "final"]
    number: str | None
    corrects: str | None = Field(None, description="credit note: the invoice it corrects")
    reason: str | None
    currency: str
    vat_rate: Decimal
    prices_include_vat: bool
    net: Money
    vat: Money
    total: Money
    credited: Money = Field(description="invoice: the sum of credit notes against it")
    created_at: datetime
    finalized_at: datetime | None
    digest: str | None
    lines: list[InvoiceLineView] = []


class InvoiceRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    period: str = Field(description="the month to invoice, YYYY-MM")
    finalize: bool = False


class InvoiceRunView(BaseModel):
    period: str
    drafted: int
    finalized: int
    tenants: int
    seconds: float


class CreditNoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500)
    amount: Decimal | None = Field(None, gt=0, max_digits=14, decimal_places=2,
                                   description="yuan incl. VAT; omit to credit the whole "
                                               "remaining total")


class AdviseRequest(BaseModel):
    """A model and a job; the advisor answers which machines, how long, what it costs."""

    model_config = ConfigDict(extra="forbid")
    params: str | None = Field(None, max_length=20,
                               description="7B, 70B, 350M…; or give the architecture")
    layers: int | None = Field(None, ge=1, le=10_000)
    hidden: int | None = Field(None, ge=1, le=1_000_000)
    heads: int | None = Field(None, ge=1, le=100_000)
    kv_heads: int | None = Field(None, ge=1, le=100_000)
    vocab: int | None = Field(None, ge=1, le=100_000_000)
    ffn: int | None = Field(None, ge=1, le=10_000_000, description="MLP inner width")
    mlp: str = Field("swiglu", max_length=16)
    norm: str = Field("rmsnorm", max_length=16)
    experts: int = Field(1, ge=1, le=100_000)
    top_k: int = Field(1, ge=1, le=1024)
    workload: str = Field(max_length=32,
                          description="inference, pretrain, full-finetune, lora, qlora")
    precision: str = Field("bf16", max_length=8,
                           description="fp32, bf16, fp16, fp8, int8, int4")
    seq_len: int = Field(4096, ge=1, le=100_000_000)
    batch: int = Field(1, ge=1, le=1_000_000, description="micro-batch per GPU, in sequences")
    checkpointing: bool = True
    lora_rank: int = Field(16, ge=1, le=1_000_000)
    tokens: float | None = Field(None, gt=0, le=1e18, description="tokens to process")
    hours: float | None = Field(None, gt=0, le=1e6,
                                description="planned hours (nominal speed)")
    budget: Decimal | None = Field(None, gt=0, max_digits=14, decimal_places=2)
    domestic: bool = Field(False, description="domestic hardware required (Ascend 910B)")
    gpu: str | None = Field(None, description="only this GPU (id, e.g. rtx4090-24g)")
    limit: int = Field(12, ge=1, le=100)


class AdviceOptionView(BaseModel):
    kind: str
    offer: str
    sku: str
    region: str
    gpu: str
    nodes: int
    gpus: int
    layout: str
    memory_per_gpu_gb: float
    memory_usable_gb: float
    hours: float
    nominal_hours: float
    term: str
    periods: int
    cost: Money
    stock: int
    in_stock: bool
    within_budget: bool
    tokens_per_hour: float
    notes: list[str]
    per_gpu_gb: dict[str, float] = Field(description="each memory term on one GPU")


class AdviceTermView(BaseModel):
    name: str
    gb: float
    why: str


class AdviceView(BaseModel):
    params: int
    active_params: int
    shape_inferred: bool
    quick_estimate_gb: float
    quick_estimate: str
    memory: list[AdviceTermView]
    total_gb: float
    work: str
    options: list[AdviceOptionView]
    recommendation: str
    bare_metal_reasons: list[str]
    warnings: list[str]
    assumptions: dict[str, float]
