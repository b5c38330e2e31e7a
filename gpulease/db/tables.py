"""SQLAlchemy 2 tables of the fleet, accounts, instances, history, the audit trail and the
node agents (the money side is db/money_tables.py; tickets, repairs and object storage
db/ops_tables.py). Times are timezone-aware UTC."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

# Re-exported: migrations and services name them through this module.
from gpulease.db.base import Base as Base
from gpulease.db.base import LockedRow as LockedRow
from gpulease.db.base import UtcDateTime as UtcDateTime


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # domain/states.TENANT: active, suspended by an operator, closed
    status: Mapped[str] = mapped_column(String(16), default="active", server_default="active")
    status_reason: Mapped[str | None] = mapped_column(String(500))
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class GpuQuota(Base):
    """An operator's cap on the GPUs a tenant may hold at once: in all (`offer` "*") or of
    one offer ("sku@region": its share of scarce stock)."""

    __tablename__ = "gpu_quotas"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    offer: Mapped[str] = mapped_column(String(140), primary_key=True)
    max_gpus: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(String(500))
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UtcDateTime())


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
    # The console's and the user's mail language (web/i18n.py); None: the browser's.
    locale: Mapped[str | None] = mapped_column(String(8))


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
    kind: Mapped[str] = mapped_column(String(16))  # infiniband | roce | ethernet (the lab)
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
    # One spelling per BMC endpoint (domain/enrollment.bmc_key) and the system's UUID:
    # with the serial, what makes a second enrollment of the same server a 409.
    bmc_key: Mapped[str | None] = mapped_column(String(300), index=True)
    system_uuid: Mapped[str | None] = mapped_column(String(64), index=True)
    # A stage failed: media out, boot override cleared and power off, best effort, by the
    # worker's safe-off job (outside any transaction), then recorded and cleared.
    safe_off_due: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # The BMC's log, read on a schedule (services/fleet/bmc_health.py): the last entry seen in
    # each log service (JSON), the health rollup, when.
    bmc_log_seen: Mapped[str | None] = mapped_column(Text)
    bmc_health: Mapped[str | None] = mapped_column(String(16))
    bmc_checked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    # The BMC pushes its alerts (Redfish EventService): the subscription's URI at the BMC,
    # "" when the BMC offers none (polled only), None when not asked yet; the hash of the
    # Context each pushed event must carry; when the last event came.
    bmc_subscription: Mapped[str | None] = mapped_column(String(500))
    bmc_events_hash: Mapped[str | None] = mapped_column(String(64))
    bmc_event_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
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
    # Network boot: the address its boot NIC gets from the operator's DHCP; the iPXE script
    # and NoCloud seed answer only a request from there (None: any boot network address).
    boot_address: Mapped[str | None] = mapped_column(String(64))
    # Where tenants reach its SSH when it sits behind NAT or a port forward (HOST:PORT, as
    # the lab's servers on 127.0.0.1); None: the address its agent reports, port 22.
    ssh_endpoint: Mapped[str | None] = mapped_column(String(300))
    # Since when it may hold a tenant's data with no certified erase after: set when it is
    # bound to an instance, cleared by a clean's passing erase. While set, it cannot become
    # available (the node lifecycle's entry check): `resume` erases it first.
    erase_due_since: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The ticket that reports a fault on it not repaired yet: set when a fault's ticket opens
    # (a tenant's own report does not), cleared when its repair is done or the ticket is
    # resolved. While set, it cannot become available (the node lifecycle's entry check):
    # cleaned after its instance, it goes for repair.
    fault_ticket_id: Mapped[str | None] = mapped_column(String(32))
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
    # Containers: root may log in over SSH with the password (asked per order); else keys.
    password_login: Mapped[bool] = mapped_column(Boolean, default=False,
                                                 server_default=false())
    credentials_revealed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    ordered_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # seconds the delivery waited on its tenant (an acceptance run its host's agent left
    # unanswered once the tenant held the keys): not the platform's lateness
    tenant_wait_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    release_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Containers: the last GPU-hour charged (hour 0 is the order's held hour).
    metered_hours: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # a snapshot restored onto the data disk at delivery: "INSTANCE/SNAPSHOT" (the order's)
    restore_from: Mapped[str | None] = mapped_column(String(100))
    # a container started from its tenant's saved image (saved_images.id)
    saved_image_id: Mapped[str | None] = mapped_column(String(32))
    # the data disk left unformatted for the tenant's own LUKS2 key
    encrypted_data: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")


class Event(Base):
    """Append-only history: every transition of a declared lifecycle (lifecycle/writer.py
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
    # The message as a phrase (domain/phrases.Phrase as JSON), when the platform wrote it:
    # the console says it in the reader's language; `message` is the English.
    phrase: Mapped[str | None] = mapped_column(Text)
    # Who caused it: user:<id> (a tenant's or an operator's request), worker, agent:<node>,
    # or the periodic job (sweep:leases, sweep:timeouts, meter:containers, run:invoices).
    actor: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (Index("ix_events_resource", "resource", "resource_id"),)


class PasswordReset(Base):
    """A password reset asked for by e-mail. The link carries the id and an HMAC over it
    under a key derived from the platform's secret (nothing secret is stored); used once,
    within its 30 minutes. The worker mails it (mailed_at; attempts and last_error when the
    SMTP server refused)."""

    __tablename__ = "password_resets"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    requested_from: Mapped[str | None] = mapped_column(String(64))
    mailed_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(String(1000))
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class AuditEntry(Base):
    """Append-only: every state-changing request and every console sign-in, with who, from
    where, on what, and how it ended. Each row's MAC covers the previous row's (a chain): a
    changed or removed row breaks it (`gpulease audit verify`)."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    seq: Mapped[int] = mapped_column(Integer, unique=True)  # gapless, under the head's lock
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    request_id: Mapped[str | None] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(String(32))
    token_id: Mapped[str | None] = mapped_column(String(32))
    role: Mapped[str | None] = mapped_column(String(16))
    tenant_id: Mapped[str | None] = mapped_column(String(32), index=True)
    source: Mapped[str | None] = mapped_column(String(64))  # the client's address
    action: Mapped[str] = mapped_column(String(200))  # METHOD /route/{template}
    target: Mapped[str | None] = mapped_column(String(300))  # the route's parameters
    outcome: Mapped[int] = mapped_column(Integer)  # the HTTP status answered
    prev_mac: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str] = mapped_column(String(64))


class AuditHead(Base):
    """The chain's end (one row): the last sequence number and MAC, where pruning by the
    retention setting cut the chain's start, and a seal over both."""

    __tablename__ = "audit_head"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer)
    last_mac: Mapped[str] = mapped_column(String(64))
    pruned_through: Mapped[int] = mapped_column(Integer, default=0)
    pruned_mac: Mapped[str] = mapped_column(String(64))
    seal: Mapped[str] = mapped_column(String(64), default="", server_default="")  # HMAC of
    # the four above: moving the head over removed rows shows (services/platform/audit.py)


class WorkerProcess(Base):
    """A worker that has run against this database (`gpulease workers`): where, since when,
    when last seen (its heartbeat), how many rows it has claimed, and when it stopped."""

    __tablename__ = "worker_processes"
    owner: Mapped[str] = mapped_column(String(80), primary_key=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(32))
    threads: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    seen_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    claims: Mapped[int] = mapped_column(BigInteger, default=0)
    stopped_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    site: Mapped[str | None] = mapped_column(String(64))  # None: every site without its own


class PlatformFact(Base):
    """Facts about the installation itself, by name (the secret key's fingerprint)."""

    __tablename__ = "platform_facts"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class RateCounter(Base):
    """Hits per key and fixed window, shared by API processes (db/rates.py)."""

    __tablename__ = "rate_counters"
    key: Mapped[str] = mapped_column(String(120), primary_key=True)
    window_s: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    hits: Mapped[int] = mapped_column(Integer)


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


class RamdiskBoot(Base):
    """One boot of the deploy ramdisk on a node (an image deploy's write, or a clean's
    erase): the plan it fetches and the report it sends back. The id is a random
    capability on the ramdisk's kernel command line (and in its ISO's URL); the row goes
    when the node's deploy or clean is over."""

    __tablename__ = "ramdisk_boots"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"))
    booted_in: Mapped[str] = mapped_column(String(32))  # the node stage that booted it
    action: Mapped[str] = mapped_column(String(16))  # write | erase
    plan: Mapped[str] = mapped_column(Text)  # key=value lines (lab/ramdisk.py reads them)
    iso_path: Mapped[str] = mapped_column(String(500))
    disks: Mapped[str | None] = mapped_column(String(500))  # what the ramdisk found
    report_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    reported_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


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
    # its telemetry stored on `pushed_day` (UTC, YYYY-MM-DD), against the daily budget, and
    # the pushes refused for going past it (ever)
    pushed_day: Mapped[str | None] = mapped_column(String(10))
    pushed_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    pushes_refused: Mapped[int] = mapped_column(Integer, default=0)


class TelemetrySummary(Base):
    """One GPU's summary over one pushed window (domain/telemetry.GpuSummary as JSON)."""

    __tablename__ = "telemetry_summaries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(80))
    summary_json: Mapped[str] = mapped_column(Text)
    # read out of the summary for the idle view (services/telemetry/idle.py)
    util_avg_pct: Mapped[float | None] = mapped_column(Float)
    window_s: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (Index("ix_telemetry_summaries_instance_received", "instance_id",
                            "received_at"),)


class IdleNotice(Base):
    """When a tenant was last told an instance's GPUs sat idle (once a day at most)."""

    __tablename__ = "idle_notices"
    instance_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    noticed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    idle_pct: Mapped[float] = mapped_column(Float)


class TelemetryHourly(Base):
    """One GPU's hour: the per-minute summaries older than GPULEASE_TELEMETRY_MINUTE_DAYS
    merged (domain/telemetry.merge), kept GPULEASE_TELEMETRY_HOUR_DAYS."""

    __tablename__ = "telemetry_hourly"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"))
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    hour: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(80))
    summary_json: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_telemetry_hourly_node_hour", "node_id", "hour"),)


class HardwareAlert(Base):
    """An alert raised from telemetry (open until a window no longer shows it) or from a
    critical entry of the BMC's log (open until the BMC's health is OK again)."""

    __tablename__ = "hardware_alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(80))
    kind: Mapped[str] = mapped_column(String(32))
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    phrase: Mapped[str | None] = mapped_column(Text)  # the message as a phrase (JSON)
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # agent: the node agent's telemetry (on the rented host: the tenant could forge it);
    # bmc: the BMC's own log (platform-side evidence), open while its health is not OK.
    source: Mapped[str] = mapped_column(String(16), default="agent", server_default="agent")


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
    progress_moved: Mapped[int | None] = mapped_column(BigInteger)  # a long command's bytes
    progress_total: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class CatalogVersion(Base):
    """A catalog published to every process (services/catalog/versions.py): its TOML text,
    digest, where it came from, who published it and when. The newest one is in force."""

    __tablename__ = "catalog_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(500))
    published_at: Mapped[datetime] = mapped_column(UtcDateTime())
    published_by: Mapped[str] = mapped_column(String(64))


class CircuitBreaker(Base):
    """A fleet-wide circuit breaker by name ("deploy"): domain/states.BREAKER."""

    __tablename__ = "circuit_breakers"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    opened_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
