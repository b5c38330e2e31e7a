"""What a family's work needs from its process, declared as narrowly as it can be. Most
needs are `Records`: the settings, the database, the clock, and the worker's wake-up (a
write that leaves work for it says so). `Priced` adds the catalog, `Sealed` the secret box,
`Moves` the lifecycle's effects (what a transition runs, and hands on); `Driven`, `Stored`
and `Keeping` add the drivers, the object store, and what the process keeps with its rate
limits' counters. A function takes the narrowest that offers what it reads, not the whole
`Platform` (the composition root's, gpulease/platform.py): what it can reach is what it
declares, mypy checks every call it hands it to, and tests/test_structure.py refuses a
Platform taken where one of these would do (three services take the Platform, each named
there with its reason)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gpulease.db.rates import RateStore
from gpulease.db.session import Database
from gpulease.domain.catalog import Catalog
from gpulease.kept import Kept
from gpulease.lifecycle.effects import Effects
from gpulease.ports.clock import Clock
from gpulease.ports.object_store import ObjectStore
from gpulease.security import SecretBox
from gpulease.settings import Settings

if TYPE_CHECKING:  # the drivers sit above the ports: named for the checker only
    from gpulease.drivers.enabled import Drivers


class Records(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def clock(self) -> Clock: ...

    def wake(self) -> None: ...


class Priced(Records, Protocol):
    """Records, and the catalog this process prices from (the offers, and the prices in
    effect today)."""

    @property
    def catalog(self) -> Catalog: ...

    @property
    def catalog_version(self) -> int | None: ...

    def price_book(self) -> Catalog: ...


class Sealed(Records, Protocol):
    """Records, and the secret box that seals credentials at rest."""

    @property
    def box(self) -> SecretBox: ...


class Moves(Priced, Protocol):
    """Priced, and every family's lifecycle effects: what a transition needs (the writer
    runs the effects of each move it makes, and hands them this)."""

    @property
    def effects(self) -> Effects[Moves]: ...


class Driven(Moves, Sealed, Protocol):
    """Moves and Sealed, and the drivers the settings enabled (BMCs, agents, container
    runtimes): what a family needs to act on hardware on its own (an operator's safe-off,
    a node's enrollment, a container host's check)."""

    @property
    def drivers(self) -> Drivers: ...


class Stored(Moves, Sealed, Protocol):
    """Moves and Sealed, and the tenants' object storage (None where none is configured)."""

    def object_store(self) -> ObjectStore | None: ...


class Keeping(Moves, Sealed, Protocol):
    """Moves and Sealed, and what the process keeps between requests (the catalog's stock,
    the audit trail's writer) and the rate limits' counters."""

    @property
    def kept(self) -> Kept: ...

    @property
    def rates(self) -> RateStore: ...
