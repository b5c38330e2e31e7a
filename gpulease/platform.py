"""The composition root: settings, database, catalog, clock, secrets and drivers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from gpulease.db.rates import DatabaseStore, MemoryStore, RateStore, RedisStore
from gpulease.db.session import Database
from gpulease.domain.catalog import Catalog, load_catalog
from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.simulated import (
    BmcWatchingAgent,
    SimulatedAgent,
    SimulatedFleet,
    SimulatedRuntime,
)
from gpulease.ports.agent import Agent
from gpulease.ports.bmc import Bmc, BmcEndpoint
from gpulease.ports.clock import Clock, SystemClock
from gpulease.ports.object_store import ObjectStore
from gpulease.ports.runtime import ContainerRuntime
from gpulease.security import SecretBox, load_or_create_key
from gpulease.settings import Settings

BmcFactory = Callable[[BmcEndpoint], Bmc]


@dataclass
class Drivers:
    """Drivers by interface; BMC drivers in a typed registry keyed by the node's bmc_driver."""

    bmc: dict[str, BmcFactory]
    agents: dict[str, Agent]  # stand-in agents by the node's bmc_driver (agent_kind builtin)
    runtime: ContainerRuntime  # shared hosts without an engine URL (the demo's)
    fleet: SimulatedFleet | None = None
    docker: ContainerRuntime | None = None  # shared hosts with a Docker engine URL

    def runtime_for(self, engine_url: str | None) -> ContainerRuntime:
        if not engine_url:
            return self.runtime
        if self.docker is None:
            raise LookupError("no Docker runtime configured for hosts with an engine URL")
        return self.docker

    def agent_for(self, driver: str) -> Agent:
        try:
            return self.agents[driver]
        except KeyError:
            raise LookupError(f"no node agent for BMC driver {driver!r}") from None

    def bmc_for(self, driver: str, endpoint: BmcEndpoint) -> Bmc:
        try:
            factory = self.bmc[driver]
        except KeyError:
            raise LookupError(
                f"no BMC driver {driver!r} configured; known: {', '.join(sorted(self.bmc))}"
            ) from None
        return factory(endpoint)


def simulated_drivers(state_dir: Path, delay_s: float, latency_s: float = 0.0,
                      redfish: RedfishDriver | None = None,
                      boot_server: Callable[[], str] | None = None) -> Drivers:
    """The demo's drivers: simulated BMC, agent and runtime; real Redfish BMCs work beside
    them (a node's bmc_driver picks which)."""
    fleet = SimulatedFleet(state_dir, delay_s, latency_s=latency_s)
    redfish = redfish or RedfishDriver()
    return Drivers(
        bmc={"simulated": fleet.bmc, "redfish": redfish.bmc},
        agents={"simulated": SimulatedAgent(fleet),
                "redfish": BmcWatchingAgent(redfish.bmc, boot_delay_s=delay_s,
                                            boot_server=boot_server,
                                            disks_dir=fleet.state_dir / "disks")},
        runtime=SimulatedRuntime(fleet),
        fleet=fleet,
    )


@dataclass
class Platform:
    settings: Settings
    db: Database
    catalog: Catalog
    box: SecretBox
    drivers: Drivers
    clock: Clock = field(default_factory=SystemClock)
    rates: RateStore = field(default_factory=MemoryStore)  # the rate limits' counters
    wake_event: threading.Event = field(default_factory=threading.Event)
    # services/audit_writer.AuditWriter, made on first use by the API's audit trail
    audit_writer: Any = field(default=None, repr=False)
    _price_book: tuple[date, Catalog, Catalog] | None = field(default=None, init=False,
                                                              repr=False)
    # The published catalog version this process prices from (services/catalog_versions);
    # None until it has adopted one (a catalog only from its file).
    catalog_version: int | None = field(default=None, init=False)
    # services/catalog.KeptStock: the catalog's last stock read
    kept_stock: Any = field(default=None, init=False, repr=False)
    _object_store: Any = field(default=None, init=False, repr=False)

    def price_book(self) -> Catalog:
        """The catalog at the prices in effect now (a price change takes effect on its
        date; leases already running keep theirs). Cached per day."""
        today = self.clock.now().date()
        cached = self._price_book
        if cached is None or cached[0] != today or cached[1] is not self.catalog:
            cached = (today, self.catalog, self.catalog.priced_at(self.clock.now()))
            self._price_book = cached
        return cached[2]

    def object_store(self) -> ObjectStore | None:
        """The tenants' object storage (GPULEASE_S3_*), None when none is configured."""
        st = self.settings
        if not st.s3_endpoint:
            return None
        if self._object_store is None or self._object_store.endpoint != st.s3_endpoint:
            from gpulease.drivers.s3_store import S3Store  # boto3 off the start-up path

            self._object_store = S3Store(st.s3_endpoint, st.s3_access_key, st.s3_secret_key,
                                         st.s3_region)
        store: ObjectStore = self._object_store
        return store

    def wake(self) -> None:
        """Hint the in-process worker that there is work (others poll)."""
        self.wake_event.set()

    @classmethod
    def from_settings(cls, settings: Settings, drivers: Drivers | None = None) -> Platform:
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings.data_dir.chmod(0o700)  # secrets live here: the owner alone may enter
        db = Database(settings.resolved_database_url(), pool_size=settings.db_pool_size,
                      limits=settings.session_limits(), max_overflow=settings.db_pool_overflow,
                      sqlite_read_slots=settings.sqlite_read_slots)
        catalog = load_catalog(settings.catalog_file)
        box = SecretBox(load_or_create_key(settings.secret_key, settings.data_dir))
        if drivers is None:
            drivers = simulated_drivers(
                settings.data_dir / "simulated", settings.demo_delay_s,
                settings.demo_call_latency_s,
                RedfishDriver(settings.bmc_timeout_s, settings.bmc_verify_tls),
                boot_server=lambda: settings.public_url)
            from gpulease.drivers.docker_runtime import DockerRuntime

            drivers.docker = DockerRuntime(
                settings.container_image, settings.container_gpus, settings.bmc_timeout_s,
                settings.docker_tls_dir)
        return cls(settings=settings, db=db, catalog=catalog, box=box, drivers=drivers,
                   rates=rate_store(settings, db))


def rate_store(settings: Settings, db: Database) -> RateStore:
    """Redis when a URL is set; the database when several API processes may share it
    (PostgreSQL); else this process's memory (the embedded SQLite default)."""
    kind = settings.rate_limit_store
    if kind == "auto":
        kind = "redis" if settings.redis_url else (
            "database" if db.dialect == "postgresql" else "memory")
    if kind == "redis":
        if not settings.redis_url:
            raise ValueError("GPULEASE_RATE_LIMIT_STORE=redis needs GPULEASE_REDIS_URL")
        return RedisStore(settings.redis_url)
    if kind == "database":
        return DatabaseStore(db.engine)
    return MemoryStore()
