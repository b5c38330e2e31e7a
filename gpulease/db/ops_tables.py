"""SQLAlchemy 2 tables of operations and data: tickets and their timelines, repairs,
tenants' object storage (its accounts and keys) and the backups of rented servers' data
disks. Times are timezone-aware UTC."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpulease.db.base import Base, Claimable, UtcDateTime


class Ticket(Base):
    """A fault or a question about a rented machine (or a free node): its severity, what it
    concerns, its SLA clocks and where it stands (domain/states.TICKET)."""

    __tablename__ = "tickets"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), index=True)
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id"), index=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))  # a fault's kind, or tenant_report
    severity: Mapped[str] = mapped_column(String(2))
    summary: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    opened_by: Mapped[str] = mapped_column(String(64))
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime())
    acknowledged_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    mitigated_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    resolved_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    response_due: Mapped[datetime | None] = mapped_column(UtcDateTime())
    mitigation_due: Mapped[datetime | None] = mapped_column(UtcDateTime())
    resolution_due: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The clocks operators were warned about before their breach, comma-separated, and
    # when the next warning is due (None: none left).
    warned: Mapped[str] = mapped_column(String(64), default="", server_default="")
    next_warning_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    # No spare could take the faulty node's place: the tenant may release with the unused
    # time refunded in full (services/lease_periods.refund_unused), since then.
    refund_unused_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # A card repair's window (services/support/card_repairs.py): proposed by an operator, accepted
    # (or declined) by the tenant, begun by the worker at its start.
    repair_window_start: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    repair_window_end: Mapped[datetime | None] = mapped_column(UtcDateTime())
    repair_window_accepted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    repair_window_begun_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # "node:gpu:kind" while a fault's ticket is open (one at a time), then NULL.
    fault_key: Mapped[str | None] = mapped_column(String(100), unique=True)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class TicketEntry(Base):
    """A line of a ticket's timeline besides its moves: a comment (the tenant's or an
    operator's; internal ones only operators see) or a piece of evidence (a hardware alert,
    a BMC log entry, an acceptance report)."""

    __tablename__ = "ticket_entries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ticket_id: Mapped[str] = mapped_column(ForeignKey("tickets.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    kind: Mapped[str] = mapped_column(String(16))  # comment | evidence
    actor: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    # A line the platform wrote, as a phrase (JSON) for the reader's language; people's
    # comments have none.
    phrase: Mapped[str | None] = mapped_column(Text)
    ref: Mapped[str | None] = mapped_column(String(64))  # alert:<id>, report:<id>
    internal: Mapped[bool] = mapped_column(Boolean, default=False)


class Repair(Base):
    """One repair of a node: why (a ticket, a reason), the parts replaced with their serials,
    when it started and ended, and who did what; time to repair per node and offer."""

    __tablename__ = "repairs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), index=True)
    offer: Mapped[str] = mapped_column(String(200))  # sku@region, as it was
    ticket_id: Mapped[str | None] = mapped_column(String(32), index=True)
    reason: Mapped[str] = mapped_column(Text)
    parts: Mapped[str | None] = mapped_column(Text)  # what was replaced, serials old → new
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_by: Mapped[str] = mapped_column(String(64))
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    finished_by: Mapped[str | None] = mapped_column(String(64))
    # A card repair: the instance the node stays with and returns to (None: the pool).
    instance_id: Mapped[str | None] = mapped_column(String(32))
    # The burn-in and acceptance run that let the node back (to the pool or its tenant).
    burned_in_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    burn_in_report_id: Mapped[str | None] = mapped_column(String(32))


class StorageAccount(Base):
    """A tenant's object storage: its bucket and the store's user its keys belong to."""

    __tablename__ = "storage_accounts"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    bucket: Mapped[str] = mapped_column(String(63), unique=True)
    store_user: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    quota_gb: Mapped[float | None] = mapped_column(Float)  # None: GPULEASE_STORAGE_QUOTA_GB
    used_bytes: Mapped[int | None] = mapped_column(BigInteger)  # as last measured …
    measured_at: Mapped[datetime | None] = mapped_column(UtcDateTime())  # … then
    # the last day (platform calendar, YYYY-MM-DD) charged in GB-days
    metered_through: Mapped[str | None] = mapped_column(String(10))
    quota_warned: Mapped[int] = mapped_column(Integer, default=0,
                                              server_default="0")  # 0, 80 or 100 (%)
    # Past its quota the store refuses the tenant's writes (reads and deletes go on):
    # since when, or None (services/storage/quota.py).
    writes_blocked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class StorageKey(Base):
    """An access key to a tenant's bucket (its secret shown once, never kept)."""

    __tablename__ = "storage_keys"
    access_key_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_by: Mapped[str] = mapped_column(String(64))
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class Backup(Claimable, Base):
    """A backup of a rented server's data disk to its tenant's bucket, or a restore from
    it, carried out by the node's agent with a key minted for the run (deleted after)."""

    __tablename__ = "backups"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    instance_id: Mapped[str] = mapped_column(String(32), index=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"))
    kind: Mapped[str] = mapped_column(String(16))  # backup | restore
    trigger: Mapped[str] = mapped_column(String(16))  # on_demand, …
    path: Mapped[str] = mapped_column(String(1024))  # on the server's data disk
    max_mbps: Mapped[float | None] = mapped_column(Float)  # bandwidth cap
    payload_enc: Mapped[str | None] = mapped_column(Text)  # sealed: the run's key secret
    snapshot_id: Mapped[str | None] = mapped_column(String(64))  # made, or restored
    # a restore's snapshot was taken of this instance (None: the run's own)
    source_instance_id: Mapped[str | None] = mapped_column(String(32))
    # the tenant's own S3 instead of the platform's: "endpoint/bucket" shown, the rest
    # (its key included) sealed
    target: Mapped[str | None] = mapped_column(String(600))
    target_enc: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    files: Mapped[int | None] = mapped_column(Integer)
    bytes_total: Mapped[int | None] = mapped_column(BigInteger)
    bytes_moved: Mapped[int | None] = mapped_column(BigInteger)
    seconds: Mapped[float | None] = mapped_column(Float)
    key_id: Mapped[str | None] = mapped_column(String(128))  # the run's key, until deleted
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # a run the erase waits on (at a lapsed lease's grace, before its erase) is tried again
    # until then, not MAX_ATTEMPTS times
    retry_until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    requested_by: Mapped[str] = mapped_column(String(64))
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class BackupPolicy(Base):
    """What a tenant asked of a rented server's backups: the directory kept, a schedule,
    and whether the platform backs it up when the lease lapses (at grace and before the
    erase: on unless opted out). An instance without a row has the defaults."""

    __tablename__ = "backup_policies"
    instance_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    every_hours: Mapped[float | None] = mapped_column(Float)  # None: no schedule
    at_lease_end: Mapped[bool] = mapped_column(Boolean, default=True)
    max_mbps: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_by: Mapped[str] = mapped_column(String(64))


class SavedImage(Claimable, Base):
    """A tenant's container instance saved as an image in the platform's registry: its
    environment, for later container orders (`--image my/NAME`)."""

    __tablename__ = "saved_images"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(64))
    source_instance_id: Mapped[str] = mapped_column(String(32))
    base_image_id: Mapped[str] = mapped_column(String(100))  # the catalog image it grew from
    reference: Mapped[str] = mapped_column(String(300))  # registry/repository:tag
    digest: Mapped[str | None] = mapped_column(String(100))
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_by: Mapped[str] = mapped_column(String(64))
    saved_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class PowerAction(Claimable, Base):
    """A tenant's power action on its own instance: a reboot or a power cycle of its servers
    through their BMCs, or a restart of its container (domain/states.POWER_ACTION)."""

    __tablename__ = "power_actions"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), index=True)
    instance_id: Mapped[str] = mapped_column(String(32), index=True)
    region: Mapped[str] = mapped_column(String(64))  # the instance's: its site's worker acts
    kind: Mapped[str] = mapped_column(String(16))  # domain/states.PowerKind
    node_name: Mapped[str | None] = mapped_column(String(64))  # one server; None: all of them
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(64))
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    sent_to: Mapped[str] = mapped_column(Text, default="")  # servers it reached, one a line
    last_error: Mapped[str | None] = mapped_column(Text)  # a transient one, sent again later
