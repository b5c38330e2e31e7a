"""Rows made on first use by whichever process gets there first: an INSERT that does nothing
when the key is already taken, so two processes making the same row at once both go on (and
then read the one row), instead of one failing on the unique key."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session


def insert_unless_present(s: Session, table: type[Any], key: str, **values: Any) -> None:
    """Insert the row unless one with the same `key` column exists (PostgreSQL and SQLite)."""
    make = pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
    s.execute(make(table).values(**values).on_conflict_do_nothing(index_elements=[key]))
