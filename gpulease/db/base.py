"""The declarative base of every table, the UTC datetime type, and the columns of a row
the worker pipeline drives."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    DateTime,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
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


class Claimable:
    """Columns of a row a worker claims to drive it (db/claims.py): who holds it and until
    when, when it is next due, and the step under way (found set by a new owner: the old
    one died in it)."""

    lock_token: Mapped[str | None] = mapped_column(String(32))
    lock_owner: Mapped[str | None] = mapped_column(String(80))
    lock_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    # Set while a step's I/O is under way; found set by a new owner = the old one died.
    step_in_progress: Mapped[str | None] = mapped_column(String(32))


class LockedRow(Claimable):
    """Columns of a row the worker's node and instance pipelines drive through stages."""

    attempts: Mapped[int] = mapped_column(Integer, default=0)
    stage: Mapped[str | None] = mapped_column(String(32))
    stage_started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    stage_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Polls of the current stage so far: a power request is sent once, then only polled.
    stage_polls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Requests of the current stage sent to the device (domain/fleet/polling.py: at most three).
    stage_requests: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
