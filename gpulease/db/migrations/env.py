"""Alembic environment: runs on the connection handed in by Database.migrate()."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gpulease.db import money_tables, ops_tables, tables

Base = tables.Base
assert "wallets" in Base.metadata.tables, money_tables  # every set of tables is known
assert "tickets" in Base.metadata.tables, ops_tables

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


run()
