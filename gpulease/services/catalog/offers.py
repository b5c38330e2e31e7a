"""The catalog as tenants see it: offers with derived prices and live stock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from functools import lru_cache

from sqlalchemy import Connection, bindparam, func, literal, select, union_all
from sqlalchemy.orm import Session

from gpulease.db.tables import Gpu, GpuAllocation, Node
from gpulease.domain.billing.money import to_fen
from gpulease.domain.catalog import (
    Catalog,
    ContainerShare,
    Offer,
    SeverityClock,
    SupportTerms,
)
from gpulease.domain.states import NodeStatus
from gpulease.kept import Key
from gpulease.ports.records import Keeping, Priced, Records
from gpulease.schemas import (
    CatalogView,
    ContainerOfferView,
    OfferView,
    PriceChangeView,
    SupportClocksView,
)


def day_price(catalog: Catalog, offer: Offer) -> Decimal:
    return to_fen(offer.monthly_price / 30 * catalog.pricing.day_factor)


def year_price(catalog: Catalog, offer: Offer) -> Decimal:
    return to_fen(offer.monthly_price * 12 * catalog.pricing.year_factor)


# The stock statements, built once: the catalog is the most read endpoint, and building a
# statement costs more than running it on a small fleet (SQLAlchemy caches the compiled
# form by the statement's shape, not the work of constructing it).
_ACTIVE_GPUS = (select(GpuAllocation.gpu_id).where(GpuAllocation.released_at.is_(None))
                .scalar_subquery())
_BARE_METAL_STOCK = (  # (pool, sku, region, free servers)
    select(literal("bare_metal"), Node.sku, Node.region, func.count())
    .where(Node.pool == "bare_metal", Node.status == NodeStatus.AVAILABLE.value,
           Node.drain_requested_at.is_(None))
    .group_by(Node.sku, Node.region))
_FREE_GPUS = (
    select(Node.id, func.count(Gpu.id))
    .join(Gpu, Gpu.node_id == Node.id)
    .where(Node.pool == bindparam("pool"), Node.status == NodeStatus.AVAILABLE.value,
           Node.drain_requested_at.is_(None), Gpu.id.not_in(_ACTIVE_GPUS))
    .group_by(Node.id))
_CONTAINER_STOCK = (  # (pool, host sku, region, free GPUs)
    select(literal("container"), Node.sku, Node.region, func.count(Gpu.id))
    .join(Gpu, Gpu.node_id == Node.id)
    .where(Node.pool == "container", Node.status == NodeStatus.AVAILABLE.value,
           Node.drain_requested_at.is_(None), Gpu.id.not_in(_ACTIVE_GPUS))
    .group_by(Node.sku, Node.region))
# both for the catalog, in one statement
_STOCK = union_all(_BARE_METAL_STOCK, _CONTAINER_STOCK)


Stock = dict[tuple[str, str], int]


def bare_metal_stock(s: Session) -> dict[tuple[str, str], int]:
    return {(sku, region): n for _, sku, region, n in s.execute(_BARE_METAL_STOCK)}


def free_gpus_by_node(s: Session, pool: str = "container") -> dict[str, int]:
    """Free GPUs per available node of a pool (GPUs without an active allocation)."""
    return {node_id: n for node_id, n in s.execute(_FREE_GPUS, {"pool": pool})}


def container_stock(s: Session) -> dict[tuple[str, str], int]:
    """Free GPUs per (host SKU, region) in the container pool, in one query."""
    return {(sku, region): n for _, sku, region, n in s.execute(_CONTAINER_STOCK)}


def offer_view(catalog: Catalog, offer: Offer, stock: int, today: date | None = None
               ) -> OfferView:
    sku = catalog.sku_by_id[offer.sku]
    gpu = catalog.gpu_by_id[sku.gpu]
    region = catalog.region_by_id[offer.region]
    return OfferView(
        id=offer.id, sku=offer.sku, region=offer.region, region_name_zh=region.name_zh,
        region_name_en=region.name_en, gpu=gpu.name, gpu_count=sku.gpu_count,
        gpu_memory_gb=gpu.memory_gb, gpu_interconnect=sku.gpu_interconnect,
        advertised_interconnect=sku.advertised_interconnect, nvlink=gpu.nvlink,
        infiniband=sku.infiniband, network=sku.network, cpu=offer.cpu, memory=offer.memory,
        disks=", ".join(f"{d.count} × {d.size_tb} TB {d.kind}" for d in offer.disks),
        monthly_price=offer.monthly_price, list_monthly_price=offer.list_price,
        discount_percent=offer.discount_percent, day_price=day_price(catalog, offer),
        year_price=year_price(catalog, offer), stock=stock,
        default_image=offer.default_image, example=offer.example,
        price_changes=[PriceChangeView(effective_from=c.effective_from,
                                       monthly_price=c.monthly_price or Decimal(0))
                       for c in offer.price_changes
                       if today is not None and c.effective_from > today],
        support=support_view(catalog.support_for(offer.sku, offer.region)),
    )


def support_view(terms: SupportTerms) -> SupportClocksView:
    def clock(c: SeverityClock) -> dict[str, Decimal]:
        return {sev: value for sev in ("P1", "P2", "P3") if (value := c.of(sev)) is not None}
    return SupportClocksView(response_minutes=clock(terms.response_minutes),
                             mitigation_hours=clock(terms.mitigation_hours),
                             resolution_hours=clock(terms.resolution_hours))


@lru_cache(maxsize=4)
def _static_view(c: Catalog, today: date) -> CatalogView:
    """Everything but stock, built once per catalog and day (the catalog is immutable;
    today's prices and the changes ahead move with the date)."""
    return CatalogView(
        pricing_rule=c.pricing.note,
        offers=[offer_view(c, o, 0, today) for o in c.offers],
        container_offers=[
            ContainerOfferView(
                id=co.id, gpu=c.gpu_by_id[co.gpu].name, region=co.region,
                price_per_gpu_hour=co.price_per_gpu_hour, max_gpus=co.max_gpus,
                free_gpus=0, default_image=co.default_image,
                **_per_gpu(c.container_share(co.id, 1)),
            )
            for co in c.container_offers
        ],
    )


def _per_gpu(share: ContainerShare) -> dict[str, object]:
    return {"cpus_per_gpu": share.cpus, "memory_gb_per_gpu": share.memory_gb,
            "pids_per_gpu": share.pids}


def live_stock(p: Records, conn: Connection | None = None) -> tuple[Stock, Stock]:
    """Free servers per (SKU, region) of the bare-metal pool and free GPUs per (host SKU,
    region) of the container pool, in one statement on a bare connection (the caller's,
    or one checked out for it)."""
    if conn is None:
        with p.db.connection() as own:
            return live_stock(p, own)
    stock: dict[str, Stock] = {"bare_metal": {}, "container": {}}
    for pool, sku, region, n in conn.execute(_STOCK):
        stock[pool][(sku, region)] = n
    return stock["bare_metal"], stock["container"]


# the tables the stock is counted from
_STOCK_TABLES = tuple(t.__tablename__ for t in (Node, Gpu, GpuAllocation))


@dataclass(frozen=True)
class KeptStock:
    seen: tuple[int, ...]  # this process's commits to the stock's tables before the read
    read_at: float  # time.monotonic() before the read
    stock: tuple[Stock, Stock]


KEPT_STOCK: Key[KeptStock] = Key("the catalog's last stock")


def catalog_stock(p: Keeping, conn: Connection | None = None) -> tuple[Stock, Stock]:
    """The stock the catalog shows: the last read, until this process commits a change to
    nodes, GPUs or allocations (an order, a release, a delivery step of its worker) or it
    is catalog_stock_max_age_s old (changes made by other processes: the API's others,
    a separate worker). Under load most catalog requests then skip the stock statement,
    while a process never shows a stock older than its own last order."""
    seen = p.db.changes.seen(_STOCK_TABLES)
    now = time.monotonic()
    kept = p.kept.get(KEPT_STOCK)
    if (kept is not None and kept.seen == seen
            and now - kept.read_at < p.settings.catalog_stock_max_age_s):
        return kept.stock
    stock = live_stock(p, conn)
    p.kept.put(KEPT_STOCK, KeptStock(seen, now, stock))
    return stock


def catalog_json(p: Keeping, conn: Connection | None = None) -> str:
    """The catalog as the API sends it. The same catalog, prices, day and stock give the
    same bytes, so the last few answers are kept and a repeated one is not built and
    serialized again."""
    stock, cstock = catalog_stock(p, conn)
    book, today = p.price_book(), p.clock.now().date()
    key = (id(p.catalog), id(book), p.catalog_version, today,
           tuple(sorted(stock.items())), tuple(sorted(cstock.items())))
    kept = _answers.get(key)
    # the catalog objects are kept beside their answer, so their ids are not reused
    if kept is not None and kept[0] is p.catalog and kept[1] is book:
        return kept[2]
    body = _assemble(p, book, today, stock, cstock).model_dump_json()
    if len(_answers) >= 32:
        _answers.clear()
    _answers[key] = (p.catalog, book, body)
    return body


_answers: dict[tuple[object, ...], tuple[Catalog, Catalog, str]] = {}


def catalog_view(p: Keeping) -> CatalogView:
    return _assemble(p, p.price_book(), p.clock.now().date(), *catalog_stock(p))


def _assemble(p: Priced, book: Catalog, today: date, stock: Stock, cstock: Stock
              ) -> CatalogView:
    static = _static_view(book, today)
    hosts = {co.id: (co.host_sku, co.region) for co in p.catalog.container_offers}
    return CatalogView(
        version=p.catalog_version,
        pricing_rule=static.pricing_rule,
        offers=[o.model_copy(update={"stock": stock.get((o.sku, o.region), 0)})
                for o in static.offers],
        container_offers=[
            c.model_copy(update={"free_gpus": cstock.get(hosts[c.id], 0)})
            for c in static.container_offers
        ],
    )
