from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from gpulease.db import money_tables, ops_tables  # noqa: F401  (their tables join the metadata)
from gpulease.db.tables import Base
from gpulease.platform import Platform


def test_migrations_match_the_models(platform: Platform) -> None:
    with platform.db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_migrate_is_idempotent(platform: Platform) -> None:
    platform.db.migrate()
    platform.db.migrate()
