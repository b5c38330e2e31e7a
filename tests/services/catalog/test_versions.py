"""One catalog for every process: published through the database by `catalog reload`,
followed by the other processes (API and worker) without a restart, refused whole when it
has an error; SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.compose import make_platform
from gpulease.domain.catalog import DEFAULT_CATALOG
from gpulease.domain.errors import InvalidInput
from gpulease.platform import Platform
from gpulease.services.catalog import offers as catalog
from gpulease.services.catalog import versions as catalog_versions
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.servers import LiveServer

H100 = "h100-80g-x8"


def h100_price(p: Platform) -> str:
    offer = next(o for o in catalog.catalog_view(p).offers
                 if o.sku == H100 and o.region == "ningxia-1")
    return f"{offer.monthly_price:.0f}"


def test_a_reload_reaches_every_process_and_a_bad_catalog_changes_nothing(
    platform: Platform, operator: TenantCtx, tenant: TenantCtx, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    platform.settings.catalog_follow_s = 0.1
    other = make_platform(platform.settings.model_copy())  # a second process
    try:
        catalog_versions.adopt(platform)
        catalog_versions.adopt(other)
        assert platform.catalog_version == other.catalog_version == 1
        text = DEFAULT_CATALOG.read_text()
        cheaper = text.replace('monthly_price = "84480"', 'monthly_price = "79001"', 1)
        with LiveServer(platform) as server:
            env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
            (tmp_path / "new.toml").write_text(cheaper)
            r = CliRunner().invoke(app, ["catalog", "reload", "--file",
                                         str(tmp_path / "new.toml")], env=env)
            assert r.exit_code == 0 and "catalog version 2 in force" in r.output, r.output
            assert h100_price(platform) == "79001"
            assert h100_price(other) == "84480"  # until it looks
            assert catalog_versions.follow(other) and h100_price(other) == "79001"
            assert not catalog_versions.follow(other)  # nothing newer

            broken = cheaper.replace('monthly_price = "79001"', 'monthly_price = "-1"', 1)
            (tmp_path / "bad.toml").write_text(broken)
            r = CliRunner().invoke(app, ["catalog", "reload", "--file",
                                         str(tmp_path / "bad.toml")], env=env)
            assert r.exit_code == 1, r.output
            assert "uploaded" in r.output and "monthly_price" in r.output
            assert len(r.output.strip().splitlines()) <= 3  # one line, no traceback
            r = CliRunner().invoke(app, ["catalog", "check", str(tmp_path / "bad.toml")])
            assert r.exit_code == 1 and "bad.toml" in r.output
            assert httpx.post(f"{server.url}/api/v1/catalog/reload", headers=auth(tenant.token),
                              json={"text": cheaper}).status_code == 403
            same = httpx.post(f"{server.url}/api/v1/catalog/reload", json={"text": cheaper},
                              headers=auth(operator.token)).json()
            assert same["id"] == 2  # the same text: nothing new

            # published by the other process: this API process's follower swaps it in
            catalog_versions.publish(other, operator.principal, text)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                seen = httpx.get(f"{server.url}/api/v1/catalog", headers=auth(tenant.token))
                if seen.json()["version"] == 3:
                    break
                time.sleep(0.05)
            assert seen.json()["version"] == 3 and h100_price(platform) == "84480"
            version = httpx.get(f"{server.url}/api/v1/catalog/version",
                                headers=auth(operator.token)).json()
            assert version["id"] == version["this_process"] == 3
            assert version["published_by"].startswith("user:")

        # a process starting with a file that differs follows the database and says so
        late = make_platform(platform.settings.model_copy(
            update={"catalog_file": tmp_path / "new.toml"}))
        with caplog.at_level(logging.WARNING, "gpulease.catalog"):
            catalog_versions.adopt(late)
        assert late.catalog_version == 3 and h100_price(late) == "84480"
        assert "differs from published catalog version 3" in caplog.text
        late.db.dispose()
        platform.settings.catalog_file = tmp_path / "none.toml"  # moved away since the start
        with pytest.raises(InvalidInput, match="cannot read catalog file"):
            catalog_versions.publish(platform, operator.principal)
        assert catalog_versions.current(platform).id == 3  # type: ignore[union-attr]
    finally:
        other.db.dispose()


def test_a_process_only_ever_moves_to_a_newer_catalog(platform: Platform,
                                                      operator: TenantCtx) -> None:
    """A look at the newest version that began before this process published a newer one
    must not put the older one back (seen as a flake: the price read right after a reload
    was the old one for a moment)."""
    catalog_versions.adopt(platform)
    first = platform.catalog
    cheaper = DEFAULT_CATALOG.read_text().replace(
        'monthly_price = "84480"', 'monthly_price = "79001"', 1)
    catalog_versions.publish(platform, operator.principal, cheaper)
    published, version = platform.catalog, platform.catalog_version
    assert version == 2 and h100_price(platform) == "79001"
    platform.catalog_version = 3  # as if a newer one were in force here already
    assert catalog_versions.follow(platform) is False and platform.catalog is published
    platform.catalog_version = 1  # a process still on the first: it moves forward
    assert catalog_versions.follow(platform) is True and platform.catalog_version == 2
    assert platform.catalog is not first and h100_price(platform) == "79001"
