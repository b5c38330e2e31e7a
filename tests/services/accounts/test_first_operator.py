"""GPULEASE_BOOTSTRAP_OPERATOR_EMAIL when two hosts start `serve` at once on a new shared
database: both see no operator, one makes it; the other starts anyway, saying so, and
writes no token file of its own. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.compose import make_platform
from gpulease.platform import Platform
from gpulease.server import bootstrap_operator
from gpulease.services.accounts import identity as accounts
from gpulease.testing.platforms import make_settings


def test_the_first_operator_made_by_another_host_at_once_is_no_failure(
        platform: Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_platform(make_settings(
        platform.settings.database_url, tmp_path / "host-1",
        bootstrap_operator_email="sre@example.com"))
    second = make_platform(make_settings(
        platform.settings.database_url, tmp_path / "host-2",
        bootstrap_operator_email="sre@example.com"))
    said: list[str] = []
    try:
        bootstrap_operator(first, said.append)
        assert (tmp_path / "host-1" / "operator.token").exists()
        # the second host counted before the first one's operator was there
        monkeypatch.setattr(accounts, "operator_count", lambda _p: 0)
        bootstrap_operator(second, said.append)
    finally:
        first.db.dispose()
        second.db.dispose()
    assert not (tmp_path / "host-2" / "operator.token").exists()
    assert "another process" in said[-1] and "sre@example.com" in said[-1]
