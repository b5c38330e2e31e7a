from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from gpulease.db import money_tables, ops_tables  # noqa: F401  (their tables join the metadata)
from gpulease.db.limits import SessionLimits
from gpulease.db.session import MIGRATION_LOCK_KEY, Database
from gpulease.db.tables import Base
from gpulease.platform import Platform
from gpulease.testing.platforms import database_url, start_migrated


def test_migrations_match_the_models(platform: Platform) -> None:
    with platform.db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_migrate_is_idempotent(platform: Platform) -> None:
    platform.db.migrate()
    platform.db.migrate()


def test_a_process_waits_for_another_migration_longer_than_a_lock_timeout(
        tmp_path: Path) -> None:
    """A process starting while another migrates waits for it, however long the other's
    migration takes, instead of failing on the lock_timeout meant for requests."""
    with database_url("postgresql", tmp_path) as url:
        start_migrated(url)
        db = Database(url, pool_size=1, limits=SessionLimits(lock_timeout_s=0.2))
        holder = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")
                                 .split("?", 1)[0], autocommit=True)
        try:
            holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
            done: list[float] = []

            def migrate() -> None:
                began = time.monotonic()
                db.migrate()
                done.append(time.monotonic() - began)

            waiting = threading.Thread(target=migrate)
            waiting.start()
            time.sleep(1.0)  # five times the lock_timeout
            assert waiting.is_alive() and not done
            holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
            waiting.join(timeout=30)
            assert done and done[0] >= 1.0
        finally:
            holder.close()
            db.engine.dispose()
