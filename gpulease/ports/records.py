"""What most of a family's work needs from its process: the settings, the database, the
clock, and the worker's wake-up (a write that leaves work for it says so). A function that
needs nothing else takes `Records`, not the whole `Platform` (the composition root's,
gpulease/platform.py): what it can reach is what it declares, and a test or a tool can hand
it any object with these. `Priced` adds the catalog, `Sealed` the secret box, `Moves` the
lifecycle's effects (what a transition runs, and hands on). Functions that need more (the
drivers, the object store, what the process keeps between requests, the rate limits'
counters) take the Platform, and say so by that; tests/test_structure.py refuses a
Platform taken where one of these would do."""

from __future__ import annotations

from typing import Protocol

from gpulease.db.session import Database
from gpulease.domain.catalog import Catalog
from gpulease.lifecycle.effects import Effects
from gpulease.ports.clock import Clock
from gpulease.security import SecretBox
from gpulease.settings import Settings


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
