"""The connection pool is a setting, not a constant (processes × pool must fit under the
database's connection limit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.pool import QueuePool

from gpulease.compose import make_platform
from gpulease.testing.platforms import make_settings


def test_pool_size_and_overflow_come_from_the_settings(tmp_path: Path) -> None:
    p = make_platform(make_settings(f"sqlite:///{tmp_path / 'p.db'}", tmp_path,
                                             db_pool_size=3, db_pool_overflow=1))
    try:
        pool = p.db.engine.pool
        assert isinstance(pool, QueuePool)
        assert (pool.size(), pool._max_overflow) == (3, 1)
    finally:
        p.db.dispose()


def test_an_empty_catalog_file_is_the_shipped_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulease.settings import Settings

    monkeypatch.setenv("GPULEASE_CATALOG_FILE", "")
    assert Settings().catalog_file is None  # not "." (the current directory)
