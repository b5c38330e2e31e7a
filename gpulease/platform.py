"""What every part of a process shares: settings, the database, the catalog it prices from,
the secret box, the enabled drivers, the clock, the lifecycle effects, the rate limits'
counters, the worker's wake-up, and what the process keeps between requests. Built once per
process by the composition root (`gpulease/compose.py`); the entry points and the worker
hand it down, and families take only the narrower needs of `ports/records.py` that it
satisfies."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import date

from gpulease.db.rates import MemoryStore, RateStore
from gpulease.db.session import Database
from gpulease.domain.catalog import Catalog
from gpulease.drivers.enabled import Drivers
from gpulease.kept import Kept
from gpulease.lifecycle.effects import Effects
from gpulease.ports.clock import Clock, SteadyClock
from gpulease.ports.object_store import ObjectStore
from gpulease.ports.records import Moves
from gpulease.security import SecretBox
from gpulease.settings import Settings


@dataclass
class Platform:
    settings: Settings
    db: Database
    catalog: Catalog
    box: SecretBox
    drivers: Drivers
    effects: Effects[Moves]
    clock: Clock = field(default_factory=SteadyClock)
    rates: RateStore = field(default_factory=MemoryStore)  # the rate limits' counters
    wake_event: threading.Event = field(default_factory=threading.Event)
    kept: Kept = field(default_factory=Kept, repr=False)
    # The published catalog version this process prices from (services/catalog/versions);
    # None until it has adopted one (a catalog only from its file).
    catalog_version: int | None = field(default=None, init=False)
    _price_book: tuple[date, Catalog, Catalog] | None = field(default=None, init=False,
                                                              repr=False)
    _object_store: ObjectStore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.clock, SteadyClock):  # a step past the skew bound is not taken
            self.clock.step_bound_s = self.settings.max_clock_skew_s

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
        return self._object_store

    def wake(self) -> None:
        """Hint the in-process worker that there is work (others poll)."""
        self.wake_event.set()

    def close(self) -> None:
        """What this process kept (a writer's queue drained first), then the database."""
        self.kept.close()
        self.db.dispose()
