"""Fixtures: every database test runs on SQLite and on the local PostgreSQL (a fresh
schema per test; GPULEASE_TEST_PG points elsewhere). What they build with is the package's
test kit (gpulease/testing/); fixtures shared across folders are plugins in tests/fixtures/."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpulease.compose import make_platform
from gpulease.demo import seed_demo_fleet
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx, new_operator, new_tenant, ssh_key
from gpulease.testing.clock import MovableClock
from gpulease.testing.platforms import DatabaseMissing, database_url, make_settings, start_migrated
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

pytest_plugins = [
    "tests.fixtures.mail",
    "tests.fixtures.storage",
    "tests.fixtures.redfish",
    "tests.fixtures.docker",
    "tests.fixtures.disks",
    "tests.fixtures.browser",
    "tests.fixtures.lab",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs -n auto --dist loadgroup): the tests that use
    the Docker engine run on one worker, one at a time, since they clean up the engine's
    tenant networks that nothing uses (one being made by another test looks unused)."""
    for item in items:
        if "engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("docker-engine"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    try:
        with database_url(request.param, tmp_path) as url:
            yield url
    except DatabaseMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    start_migrated(db_url)
    p = make_platform(make_settings(db_url, tmp_path / "data"))
    p.db.migrate()  # at head already: checks, and does nothing
    yield p
    # an app without its lifespan (TestClient outside `with`) leaves its audit writer's
    # queue: drained before the drop
    p.close()


@pytest.fixture
def fleet(platform: Platform) -> Platform:
    """The platform with the demo fleet: two simulated nodes per offer."""
    seed_demo_fleet(platform, 2)
    return platform


@pytest.fixture
def worker(platform: Platform) -> Worker:
    return Worker(platform, owner="test-worker")


@pytest.fixture
def clock(fleet: Platform) -> MovableClock:
    """The fleet's clock, standing at 2026-12-01 09:00 UTC until a test moves it."""
    c = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = c
    return c


@pytest.fixture
def tenant(platform: Platform) -> TenantCtx:
    return new_tenant(platform)


@pytest.fixture
def operator(platform: Platform) -> TenantCtx:
    return new_operator(platform)


@pytest.fixture
def key() -> str:
    return ssh_key()


@pytest.fixture
def server(platform: Platform) -> Iterator[LiveServer]:
    with LiveServer(platform) as live:
        yield live
