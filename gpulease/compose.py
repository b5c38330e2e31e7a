"""The composition root: a process's platform from its settings. The entry points (`up`,
`serve`, `worker`, the CLI's server-side commands), the tests and the benches build their
platform here and nowhere else: the drivers the settings enable, and every family's
lifecycle effects in the order they run."""

from __future__ import annotations

from gpulease import process_metrics
from gpulease.db.rates import DatabaseStore, MemoryStore, RateStore, RedisStore
from gpulease.db.session import Database
from gpulease.domain.catalog import load_catalog
from gpulease.drivers.enabled import Drivers, drivers_for
from gpulease.lifecycle.effects import Effects
from gpulease.platform import Platform
from gpulease.ports.records import Moves
from gpulease.security import SecretBox, load_or_create_key
from gpulease.services.agents import effects as agent_effects
from gpulease.services.instances import effects as instance_effects
from gpulease.services.money import effects as money_effects
from gpulease.settings import Settings

# Every family's effects, in the order they run for one event (an instance's release: the
# worker takes it, then the money).
EFFECTS: Effects[Moves] = Effects.of(
    instance_effects.EFFECTS,
    money_effects.EFFECTS,
    agent_effects.EFFECTS,
)


def make_platform(settings: Settings, drivers: Drivers | None = None) -> Platform:
    """The platform of `settings`: its data directory (secrets live there: the owner alone
    may enter), database, catalog, secret key and drivers (`drivers` replaces them)."""
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings.data_dir.chmod(0o700)
    db = Database(settings.resolved_database_url(), pool_size=settings.db_pool_size,
                  limits=settings.session_limits(), max_overflow=settings.db_pool_overflow,
                  sqlite_read_slots=settings.sqlite_read_slots)
    pool = db.engine.pool
    process_metrics.watch_pool(lambda: float(getattr(pool, "checkedout", lambda: 0)()),
                               lambda: float(getattr(pool, "size", lambda: 0)()))
    catalog = load_catalog(settings.catalog_file)
    box = SecretBox(load_or_create_key(settings.secret_key, settings.data_dir))
    return Platform(settings=settings, db=db, catalog=catalog, box=box,
                    drivers=drivers if drivers is not None else drivers_for(settings),
                    effects=EFFECTS, rates=rate_store(settings, db))


def rate_store(settings: Settings, db: Database) -> RateStore:
    """Redis when a URL is set; else the database (SQLite too: `serve --workers N` shares
    it); this process's memory only when GPULEASE_RATE_LIMIT_STORE=memory says so."""
    kind = settings.rate_limit_store
    if kind == "auto":
        kind = "redis" if settings.redis_url else "database"
    if kind == "redis":
        if not settings.redis_url:
            raise ValueError("GPULEASE_RATE_LIMIT_STORE=redis needs GPULEASE_REDIS_URL")
        return RedisStore(settings.redis_url)
    if kind == "database":
        return DatabaseStore(db.engine)
    return MemoryStore()
