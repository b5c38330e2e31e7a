"""Rate limits: per token and per address (429 with Retry-After), a flood of bad tokens
from one address slowed, a console lockout that only the failing address earns, and
counters that hold across API processes (in the database, SQLite or PostgreSQL) and in
Redis; sign-in limits over a sliding window that count failures only and answer alike for
a real account and an unknown one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis

from gpulease.compose import make_platform
from gpulease.db.rates import DatabaseStore, MemoryStore, RedisStore
from gpulease.domain.errors import TooManyRequests, Unauthorized
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.platforms import make_settings, start_migrated
from gpulease.testing.servers import LiveServer


@pytest.fixture
def tight(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    start_migrated(db_url)
    p = make_platform(make_settings(
        db_url, tmp_path / "data", rate_limit_per_token_per_min=5,
        rate_limit_anonymous_per_min=4, rate_limit_auth_failures_per_min=3))
    p.db.migrate()
    p.clock = MovableClock(datetime(2026, 12, 1, 9, 0, 5, tzinfo=UTC))  # windows stay put
    yield p
    p.db.dispose()


def test_a_token_and_an_address_have_their_limits(tight: Platform) -> None:
    tenant = new_tenant(tight)
    other = new_tenant(tight)
    with LiveServer(tight) as server:
        url = f"{server.url}/api/v1/me"
        mine = [httpx.get(url, headers={"Authorization": f"Bearer {tenant.token}"})
                for _ in range(6)]
        assert [r.status_code for r in mine] == [200] * 5 + [429]
        assert int(mine[-1].headers["retry-after"]) >= 1
        assert "5 requests a minute" in mine[-1].json()["detail"]
        theirs = httpx.get(url, headers={"Authorization": f"Bearer {other.token}"})
        assert theirs.status_code == 200  # another token has its own count
        anonymous = [httpx.get(f"{server.url}/api/v1/catalog").status_code for _ in range(5)]
        assert anonymous == [401] * 4 + [429]
        assert httpx.get(f"{server.url}/healthz").status_code == 200  # never limited


def test_a_flood_of_bad_tokens_from_one_address_is_slowed(tight: Platform) -> None:
    tenant = new_tenant(tight)
    with LiveServer(tight) as server:
        url = f"{server.url}/api/v1/me"
        guesses = [httpx.get(url, headers={"Authorization": f"Bearer glp_{uuid.uuid4().hex}"})
                   for _ in range(5)]
        assert [r.status_code for r in guesses] == [401, 401, 401, 429, 429]
        good = httpx.get(url, headers={"Authorization": f"Bearer {tenant.token}"})
        assert good.status_code == 429  # from the flooding address, even a good token waits
        assert "unknown or expired tokens" in good.json()["detail"]


def test_a_stranger_cannot_lock_a_user_out(platform: Platform, tenant: TenantCtx) -> None:
    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    platform.clock = clock
    users.change_password(platform, tenant.principal, "the right passphrase", None)
    email = users.list_users(platform, tenant.principal).items[0].email
    for _ in range(platform.settings.sign_in_failures_per_account):
        with pytest.raises(Unauthorized):
            accounts.console_login(platform, email, "a guess of mine", "203.0.113.7")
    with pytest.raises(TooManyRequests, match="from your address; try again after 09:15"):
        accounts.console_login(platform, email, "the right passphrase", "203.0.113.7")
    # the owner, from their own address, signs in as ever
    accounts.console_login(platform, email, "the right passphrase", "198.51.100.4")
    clock.move(minutes=15, seconds=1)  # the failures slid out
    accounts.console_login(platform, email, "the right passphrase", "203.0.113.7")


def test_a_password_spray_from_one_address_is_slowed(platform: Platform) -> None:
    platform.clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))  # one window
    for n in range(platform.settings.sign_in_attempts_per_address):
        with pytest.raises(Unauthorized):
            accounts.console_login(platform, f"user{n}@example.com", "Summer2026!", "192.0.2.9")
    with pytest.raises(TooManyRequests, match="failed sign-ins from your address"):
        accounts.console_login(platform, "another@example.com", "Summer2026!", "192.0.2.9")


def test_colleagues_behind_one_address_signing_in_rightly_spend_nothing(
    platform: Platform, tenant: TenantCtx
) -> None:
    platform.clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    users.change_password(platform, tenant.principal, "the right passphrase", None)
    email = users.list_users(platform, tenant.principal).items[0].email
    for _ in range(platform.settings.sign_in_attempts_per_address + 5):
        accounts.console_login(platform, email, "the right passphrase", "192.0.2.10")


def test_failures_across_a_window_edge_are_not_let_through_twice(platform: Platform) -> None:
    """The limit is a sliding 15 minutes: 30 failures just before a fixed window's edge
    still count just after it (a fixed window let 60 through in 102 s)."""
    clock = MovableClock(datetime(2026, 12, 1, 9, 14, 10, tzinfo=UTC))
    platform.clock = clock
    limit = platform.settings.sign_in_attempts_per_address
    for n in range(limit):
        with pytest.raises(Unauthorized):
            accounts.console_login(platform, f"user{n}@example.com", "Summer2026!", "192.0.2.9")
    clock.move(seconds=50)  # 09:15:00, a fixed window's edge: a fixed window let 30 more in
    let_through, waits = 0, []
    for n in range(10):  # one guess every 10 s for 100 s
        clock.move(seconds=10)
        try:
            accounts.console_login(platform, f"more{n}@example.com", "Summer2026!", "192.0.2.9")
        except Unauthorized:
            let_through += 1
        except TooManyRequests as refused:
            waits.append(refused.retry_after_s)
    assert let_through <= 4 and len(waits) >= 6  # as the old failures slide out, not 10
    assert all(0 < w <= 15 * 60 + 2 for w in waits)


def test_a_locked_real_account_and_an_unknown_one_get_the_same_answer(
    platform: Platform, tenant: TenantCtx
) -> None:
    platform.clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    users.change_password(platform, tenant.principal, "the right passphrase", None)
    real = users.list_users(platform, tenant.principal).items[0].email
    answers = []
    for email in (real, "nobody-here@example.com"):
        for _ in range(platform.settings.sign_in_failures_per_account):
            with pytest.raises(Unauthorized):
                accounts.console_login(platform, email, "a guess", "203.0.113.8")
        with pytest.raises(TooManyRequests) as refused:
            accounts.console_login(platform, email, "a guess", "203.0.113.8")
        answers.append((refused.value.status, str(refused.value), refused.value.retry_after_s))
    assert answers[0] == answers[1]


def test_guesses_of_the_current_password_are_limited_per_user(
    platform: Platform, tenant: TenantCtx
) -> None:
    from gpulease.domain.errors import Forbidden

    platform.clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    users.change_password(platform, tenant.principal, "the right passphrase", None)
    for n in range(platform.settings.sign_in_failures_per_account):
        with pytest.raises(Forbidden):
            users.change_password(platform, tenant.principal, "a new passphrase here",
                                  f"guess {n}")
    with pytest.raises(TooManyRequests) as refused:
        users.change_password(platform, tenant.principal, "a new passphrase here",
                              "the right passphrase")
    assert refused.value.retry_after_s > 0


def test_counters_hold_across_api_processes(platform: Platform) -> None:
    now = datetime.now(UTC).timestamp()
    first, second = DatabaseStore(platform.db.engine), DatabaseStore(platform.db.engine)
    for _ in range(3):
        first.hit("tok:shared", 60, now)
        second.hit("tok:shared", 60, now)
    first.sync(now)
    second.sync(now)
    first.sync(now)  # learns what the second added
    assert first.count("tok:shared", 60, now) == second.count("tok:shared", 60, now) == 6
    assert first.hit("tok:shared", 60, now) == 7
    assert isinstance(MemoryStore().hit("x", 60, now), int)


def test_redis_counts_exactly_across_processes() -> None:
    url = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(url, socket_timeout=1).ping()
    except redis.RedisError:
        pytest.skip("no Redis at 127.0.0.1:6379")
    key, now = f"tok:{uuid.uuid4().hex}", datetime.now(UTC).timestamp()
    a, b = RedisStore(url), RedisStore(url)
    assert [a.hit(key, 60, now), b.hit(key, 60, now), a.hit(key, 60, now)] == [1, 2, 3]
    assert b.count(key, 60, now) == 3
    assert a.count(key, 60, now + timedelta(minutes=1).total_seconds()) == 0
