"""SQLAlchemy 2 tables. Times are timezone-aware UTC; money is Numeric."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UtcDateTime(TypeDecorator[datetime]):
    """Stores aware datetimes; SQLite drops the zone, so it is put back on read."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None:
            if value.tzinfo is None:
                raise ValueError("naive datetime given; use datetime.now(UTC)")
            value = value.astimezone(UTC)
            if dialect.name == "sqlite":
                value = value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class LockedRow:
    """Columns of a row the worker pipeline drives (see worker/pipeline.py)."""

    lock_token: Mapped[str | None] = mapped_column(String(32))
    lock_owner: Mapped[str | None] = mapped_column(String(80))
    lock_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    stage: Mapped[str | None] = mapped_column(String(32))
    stage_started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    stage_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Polls of the current stage so far: a power request is sent once, then only polled.
    stage_polls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Set while a step's I/O is under way; found set by a new owner = the old one died.
    step_in_progress: Mapped[str | None] = mapped_column(String(32))
    last_error: Mapped[str | None] = mapped_column(Text)


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Removed by a tenant admin: kept for the record, its e-mail freed (suffixed).
    removed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Console sign-in: wrong passwords in a row, and the block they earned.
    failed_sign_ins: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sign_in_blocked_until: Mapped[datetime | None] = mapped_column(UtcDateTime())


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Fabric(Base):
    """One InfiniBand (or RoCE v2) fabric: nodes on it can form a cluster."""

    __tablename__ = "fabrics"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # infiniband | roce
    rate_gbps: Mapped[int] = mapped_column(Integer)


class Rack(Base):
    __tablename__ = "racks"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), index=True)
    zone: Mapped[str] = mapped_column(String(64))
    fabric_id: Mapped[str | None] = mapped_column(ForeignKey("fabrics.id"))
    leaf_switch: Mapped[str | None] = mapped_column(String(64))


class Node(LockedRow, Base):
    __tablename__ = "nodes"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    sku: Mapped[str] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64))
    pool: Mapped[str] = mapped_column(String(16))  # bare_metal | container
    serial: Mapped[str] = mapped_column(String(100))
    rack_id: Mapped[str | None] = mapped_column(ForeignKey("racks.id"))
    fabric_id: Mapped[str | None] = mapped_column(ForeignKey("fabrics.id"), index=True)
    bmc_driver: Mapped[str] = mapped_column(String(16))  # simulated | redfish
    # builtin: the BMC driver's stand-in agent (simulated servers, the demo);
    # gpulease: the real `gpulease agent` on the server, driven by commands it polls for.
    agent_kind: Mapped[str] = mapped_column(String(16), default="builtin",
                                            server_default="builtin")
    bmc_address: Mapped[str] = mapped_column(String(300))
    bmc_username: Mapped[str] = mapped_column(String(100))
    bmc_password_enc: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    # Bumped by every claim: a claim that read an older generation updates nothing.
    generation: Mapped[int] = mapped_column(Integer, default=0)
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"), index=True)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    # What the BMC reported at enrollment (JSON), and how it compared with the offer.
    inventory_json: Mapped[str | None] = mapped_column(Text)
    # A shared (container) server's Docker engine: unix://, tcp://host:2376 or ssh://…;
    # None on bare-metal nodes and on the demo's simulated hosts.
    runtime_url: Mapped[str | None] = mapped_column(String(300))
    # Set by `node drain`: the node goes to maintenance instead of available once freed.
    drain_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())

    __table_args__ = (Index("ix_nodes_sku_region_status", "sku", "region", "status"),)


class Gpu(Base):
    __tablename__ = "gpus"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"))
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(64))
    uuid: Mapped[str] = mapped_column(String(64))
    __table_args__ = (UniqueConstraint("node_id", "index", name="uq_gpus_node_index"),)


class GpuAllocation(Base):
    """A GPU held by an instance. The partial unique index lets the database itself
    refuse a second active allocation of one GPU."""

    __tablename__ = "gpu_allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"))
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime())

    __table_args__ = (
        Index(
            "uq_gpu_allocations_active_gpu",
            "gpu_id",
            unique=True,
            sqlite_where=text("released_at IS NULL"),
            postgresql_where=text("released_at IS NULL"),
        ),
    )


class Instance(LockedRow, Base):
    __tablename__ = "instances"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(16))  # bare_metal | cluster | container
    sku: Mapped[str] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64))
    container_offer: Mapped[str | None] = mapped_column(String(64))
    term: Mapped[str] = mapped_column(String(8))
    image_id: Mapped[str] = mapped_column(String(100))
    node_count: Mapped[int] = mapped_column(Integer)
    gpu_count: Mapped[int] = mapped_column(Integer)
    fabric_id: Mapped[str | None] = mapped_column(String(64))
    ssh_keys: Mapped[str] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    ssh_port: Mapped[int | None] = mapped_column(Integer)
    root_password_enc: Mapped[str | None] = mapped_column(Text)
    credentials_revealed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    ordered_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    release_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Containers: the last GPU-hour charged (hour 0 is the order's held hour).
    metered_hours: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Event(Base):
    """Append-only history: every transition of a declared lifecycle (services/lifecycle.py
    writes them), and notes on an instance's history (a move to a spare, a renewal, a
    credit)."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    # node | instance | lease | invoice | agent_command
    resource: Mapped[str] = mapped_column(String(16))
    resource_id: Mapped[str] = mapped_column(String(32))
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # status | stage | error | result | note
    from_value: Mapped[str | None] = mapped_column(String(32))
    to_value: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    # Who caused it: user:<id> (a tenant's or an operator's request), worker, agent:<node>,
    # or the periodic job (sweep:leases, sweep:timeouts, meter:containers, run:invoices).
    actor: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (Index("ix_events_resource", "resource", "resource_id"),)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    key: Mapped[str] = mapped_column(String(200))
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    __table_args__ = (UniqueConstraint("user_id", "key", name="uq_idempotency_user_key"),)


class CustomImage(Base):
    """An OS image an operator added at run time (the catalog file holds the built-in ones)."""

    __tablename__ = "custom_images"
    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    os: Mapped[str] = mapped_column(String(200))
    gpu_vendor: Mapped[str] = mapped_column(String(16))
    software: Mapped[str] = mapped_column(Text, default="")  # one item per line
    url: Mapped[str] = mapped_column(Text)
    checksum: Mapped[str] = mapped_column(String(80))
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ConfigDrive(Base):
    """A deploy's config drive, served once to the server's BMC, deleted after install.
    The id is a random capability (the URL the BMC fetches)."""

    __tablename__ = "config_drives"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"))
    agent_token_hash: Mapped[str] = mapped_column(String(64))
    iso: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class AgentEnrollment(Base):
    """A one-time token a node agent trades for its credential (from the config drive, or
    minted by an operator to re-enroll an agent)."""

    __tablename__ = "agent_enrollments"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class NodeAgent(Base):
    """The agent running on a node: its credential (hashed) and what it last reported."""

    __tablename__ = "node_agents"
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    credential_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hostname: Mapped[str] = mapped_column(String(200))
    address: Mapped[str | None] = mapped_column(String(300))  # where its /metrics listens
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime())
    inventory_json: Mapped[str | None] = mapped_column(Text)


class TelemetrySummary(Base):
    """One GPU's summary over one pushed window (domain/telemetry.GpuSummary as JSON)."""

    __tablename__ = "telemetry_summaries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(80))
    summary_json: Mapped[str] = mapped_column(Text)


class HardwareAlert(Base):
    """An alert raised from telemetry; open until a window no longer shows it."""

    __tablename__ = "hardware_alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(80))
    kind: Mapped[str] = mapped_column(String(32))
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class AcceptanceReport(Base):
    """One run of the acceptance suite (domain/acceptance.Report as JSON)."""

    __tablename__ = "acceptance_reports"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    trigger: Mapped[str] = mapped_column(String(16))  # delivery | on_demand
    passed: Mapped[bool] = mapped_column(Boolean)
    simulated: Mapped[bool] = mapped_column(Boolean)
    report_json: Mapped[str] = mapped_column(Text)


class EraseCertificate(Base):
    """One device's erase certificate (agent/erase.Certificate as JSON, digest sealed)."""

    __tablename__ = "erase_certificates"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    device: Mapped[str] = mapped_column(String(200))
    serial: Mapped[str | None] = mapped_column(String(200))
    method: Mapped[str] = mapped_column(String(64))
    nist_level: Mapped[str] = mapped_column(String(64))
    passed: Mapped[bool] = mapped_column(Boolean)
    simulated: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    digest: Mapped[str] = mapped_column(String(64))
    certificate_json: Mapped[str] = mapped_column(Text)


class AgentCommand(Base):
    """Work for a node's agent (configure, verify, erase). The agent polls for it over its
    own outbound connection (no inbound port on the server needed) and posts the result;
    the worker's step waits for that result."""

    __tablename__ = "agent_commands"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(16))  # configure | verify | erase
    trigger: Mapped[str] = mapped_column(String(16))  # a stage name, or on_demand
    payload_enc: Mapped[str] = mapped_column(Text)  # sealed: it may carry a root password
    status: Mapped[str] = mapped_column(String(16))  # pending | running | done | failed
    result_json: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


MONEY = Numeric(14, 2)
QUANTITY = Numeric(18, 6)
UNIT_PRICE = Numeric(14, 6)


class Wallet(Base):
    """A tenant's prepaid balance. Moves only together with a ledger entry."""

    __tablename__ = "wallets"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    balance: Mapped[Decimal] = mapped_column(MONEY)
    credit_limit: Mapped[Decimal] = mapped_column(MONEY)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class LedgerEntry(Base):
    """Append-only: every movement of a wallet (topup, hold, hold_release, charge, refund,
    credit). Amounts are signed (money in is positive) and always sum to the balance."""

    __tablename__ = "ledger_entries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    kind: Mapped[str] = mapped_column(String(16))
    amount: Mapped[Decimal] = mapped_column(MONEY)
    balance_after: Mapped[Decimal] = mapped_column(MONEY)
    reference: Mapped[str | None] = mapped_column(String(200))
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    created_by: Mapped[str | None] = mapped_column(String(32))
    # What an invoice line says about it: a label, the quantity, its unit and unit price
    # (metered usage), and when the service was rendered: the start of the metered piece,
    # so usage reported late belongs to the month it was used in (None: `at`).
    item: Mapped[str | None] = mapped_column(String(200))
    quantity: Mapped[Decimal | None] = mapped_column(QUANTITY)
    unit: Mapped[str | None] = mapped_column(String(16))
    unit_price: Mapped[Decimal | None] = mapped_column(UNIT_PRICE)
    service_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The invoice (or credit note) that bills this entry: at most one, ever.
    invoice_id: Mapped[str | None] = mapped_column(ForeignKey("invoices.id"))

    __table_args__ = (Index("ix_ledger_entries_unbilled", "tenant_id", "invoice_id"),)


class UsageRecord(Base):
    """One metered quantity (container GPU-hours, egress GB, extra storage GB-days) under
    the reporter's idempotency key: the same key twice is ignored, never billed twice."""

    __tablename__ = "usage_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    key: Mapped[str] = mapped_column(String(128))
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(24))
    quantity: Mapped[Decimal] = mapped_column(QUANTITY)
    unit_price: Mapped[Decimal] = mapped_column(UNIT_PRICE)
    amount: Mapped[Decimal] = mapped_column(MONEY)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime] = mapped_column(UtcDateTime())
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())
    source: Mapped[str] = mapped_column(String(32))  # worker | api:<user>

    __table_args__ = (UniqueConstraint("tenant_id", "key", name="uq_usage_records_key"),)


class Invoice(Base):
    """A tenant's monthly invoice or a credit note correcting one. A draft is recomputed
    from the ledger until it is finalized; then it never changes."""

    __tablename__ = "invoices"
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # invoice | credit_note
    period: Mapped[str] = mapped_column(String(7), index=True)  # YYYY-MM
    status: Mapped[str] = mapped_column(String(8), index=True)  # draft | final
    number: Mapped[str | None] = mapped_column(String(24), unique=True)
    corrects_id: Mapped[str | None] = mapped_column(String(24))
    reason: Mapped[str | None] = mapped_column(Text)
    currency: Mapped[str] = mapped_column(String(3))
    vat_rate: Mapped[Decimal] = mapped_column(Numeric(6, 4))
    prices_include_vat: Mapped[bool] = mapped_column(Boolean)
    net: Mapped[Decimal] = mapped_column(MONEY)
    vat: Mapped[Decimal] = mapped_column(MONEY)
    total: Mapped[Decimal] = mapped_column(MONEY)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finalized_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    digest: Mapped[str | None] = mapped_column(String(64))  # sha256 of the final content

    # One monthly invoice per tenant and period (credit notes are not limited).
    __table_args__ = (Index("uq_invoices_tenant_period", "tenant_id", "period", unique=True,
                            sqlite_where=text("kind = 'invoice'"),
                            postgresql_where=text("kind = 'invoice'")),)


class InvoiceLine(Base):
    __tablename__ = "invoice_lines"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    invoice_id: Mapped[str] = mapped_column(ForeignKey("invoices.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    instance_id: Mapped[str | None] = mapped_column(String(32))
    description: Mapped[str] = mapped_column(String(200))
    quantity: Mapped[Decimal | None] = mapped_column(QUANTITY)
    unit: Mapped[str | None] = mapped_column(String(16))
    unit_price: Mapped[Decimal | None] = mapped_column(UNIT_PRICE)
    service_from: Mapped[datetime | None] = mapped_column(UtcDateTime())
    service_to: Mapped[datetime | None] = mapped_column(UtcDateTime())
    entries: Mapped[int] = mapped_column(Integer)  # ledger entries billed by this line
    net: Mapped[Decimal] = mapped_column(MONEY)
    vat: Mapped[Decimal] = mapped_column(MONEY)
    gross: Mapped[Decimal] = mapped_column(MONEY)


class InvoiceRun(Base):
    """The worker's record of each month's automatic run: drafted, then finalized."""

    __tablename__ = "invoice_runs"
    period: Mapped[str] = mapped_column(String(7), primary_key=True)
    drafted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finalized_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    invoices: Mapped[int] = mapped_column(Integer, default=0)


class InvoiceSequence(Base):
    """Gapless numbers per series and year (GL2026-000001, CN2026-000001)."""

    __tablename__ = "invoice_sequences"
    series: Mapped[str] = mapped_column(String(8), primary_key=True)
    last: Mapped[int] = mapped_column(Integer)


class Lease(Base):
    """A bare-metal instance's term: from delivery to ends_at, then grace, then erase."""

    __tablename__ = "leases"
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), unique=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    term: Mapped[str] = mapped_column(String(8))
    unit_price: Mapped[Decimal] = mapped_column(MONEY)  # fixed at the start; kept on renewal
    periods: Mapped[int] = mapped_column(Integer)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    grace_until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    status: Mapped[str] = mapped_column(String(16), index=True)  # active | grace | ended
    auto_renew: Mapped[bool] = mapped_column(Boolean)
    reminders_sent: Mapped[str] = mapped_column(String(100))  # "7d,3d,1d,expiry"
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class LeaseNotice(Base):
    """The outbox of lease reminders (7, 3, 1 days before, at expiry, at erase)."""

    __tablename__ = "lease_notices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    instance_id: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # Each channel is marked on success: a failed webhook is retried without mailing twice.
    email_sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    webhook_sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)


class TenantWebhook(Base):
    """Where a tenant receives signed event notifications (HMAC-SHA256 with its secret)."""

    __tablename__ = "tenant_webhooks"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    url: Mapped[str] = mapped_column(String(500))
    secret_enc: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
