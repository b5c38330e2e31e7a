"""Orders: check a request against the catalog, then place it in one transaction: the
instance, its claimed nodes or GPUs (services/orders/placement.py says how nothing is held
twice), its history and the hold on its first period. All of it, or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.pricing import PricingError, check_addon
from gpulease.domain.catalog import BARE_METAL_TERMS, Term
from gpulease.domain.errors import Conflict, InvalidInput, OutOfStock, Unavailable
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.ssh import check_ssh_key
from gpulease.domain.states import INSTANCE, INSTANCE_STAGE
from gpulease.lifecycle.binding import Raced, hold_gpus
from gpulease.lifecycle.history import by
from gpulease.lifecycle.writer import initial
from gpulease.platform import Platform
from gpulease.ports.records import Priced, Records, Sealed
from gpulease.schemas import InstanceView, OrderRequest
from gpulease.security import new_id, new_root_password
from gpulease.services.accounts.quotas import check_order
from gpulease.services.accounts.tenants import refuse_orders_unless_active
from gpulease.services.catalog.images import all_images, find_image
from gpulease.services.catalog.offers import bare_metal_stock, free_gpus_by_node
from gpulease.services.instances.views import assemble_view
from gpulease.services.money import addons
from gpulease.services.money.budgets import check_spend
from gpulease.services.money.wallet import hold_first_period
from gpulease.services.orders.placement import (
    Claimed,
    Offered,
    claim_bare_metal,
    claim_cluster,
    claim_container_slice,
    free_per_fabric,
    node_claim_events,
    pick_fabric,
)
from gpulease.services.platform import sites
from gpulease.services.platform.idempotency import idem_for, remember, replay
from gpulease.services.storage.backups import find_snapshot
from gpulease.services.storage.saved_images import PREFIX, for_order

MAX_CLUSTER_NODES = 256
CLAIM_RETRIES = 12


@dataclass(frozen=True)
class Plan:
    kind: str
    sku: str
    region: str
    term: str
    image: str
    nodes: int
    gpus: int
    ssh_keys: tuple[str, ...]
    container_offer: str | None
    name: str | None
    password_login: bool = False
    add: tuple[tuple[str, Decimal], ...] = ()  # add-ons and quantities
    restore: str | None = None  # a snapshot for the data disk at delivery
    saved_image: str | None = None  # a container from the tenant's saved image: my/NAME
    encrypted_data: bool = False  # the data disk left for the tenant's own LUKS2 key

    @property
    def offered(self) -> Offered:
        return Offered(self.sku, self.region)


def plan_order(p: Priced, req: OrderRequest) -> Plan:
    """Check an order against the catalog; every error names the field and what is accepted."""
    c = p.catalog
    if not req.ssh_keys:
        raise InvalidInput(
            "ssh_keys", "Give at least one SSH public key (e.g. ~/.ssh/id_ed25519.pub)."
        )
    keys = tuple(check_ssh_key(k) for k in req.ssh_keys)
    if req.kind == "container":
        if req.encrypted_data:
            raise InvalidInput("encrypted_data", "A container's /data is a volume on a "
                               "shared host; order bare metal for a disk of your own to "
                               "encrypt.")
        if req.restore is not None:
            raise InvalidInput("restore", "A container keeps no data disk to restore onto; "
                               "order bare metal, or copy from your bucket inside it.")
        if req.add:
            raise InvalidInput("add", "Add-ons go with bare-metal and cluster leases; a "
                                      "container's egress is metered. Leave add out.")
        if not req.offer:
            raise InvalidInput("offer", "A container order needs an offer.",
                               sorted(c.container_offer_by_id))
        co = c.container_offer_by_id.get(req.offer)
        if co is None:
            raise InvalidInput("offer", "Unknown container offer {req_offer!r}.",
                               sorted(c.container_offer_by_id), req_offer=req.offer)
        term = req.term or Term.HOUR.value
        if term != Term.HOUR.value:
            raise InvalidInput("term", "Container instances are billed by the hour, not {term!r}.",
                               [Term.HOUR.value], term=term)
        gpus = req.gpus if req.gpus is not None else 1
        if not 1 <= gpus <= co.max_gpus:
            raise InvalidInput("gpus", "A container takes 1 to {max_gpus} GPUs, not {gpus}.",
                               [str(n) for n in range(1, co.max_gpus + 1)],
                               max_gpus=co.max_gpus, gpus=gpus)
        gpu = c.gpu_by_id[co.gpu]
        saved = req.image if req.image and req.image.startswith(PREFIX) else None
        image = _image(p, co.default_image if saved else req.image or co.default_image,
                       gpu.vendor)
        return Plan("container", co.host_sku, co.region, term, image, 1, gpus, keys, co.id,
                    req.name, req.ssh_password, saved_image=saved)

    if req.ssh_password:
        raise InvalidInput("ssh_password", "Bare metal takes SSH keys only; its root password "
                           "is for the server's console. Leave ssh_password out.")

    if not req.sku or req.sku not in c.sku_by_id:
        raise InvalidInput("sku", phrase("Unknown SKU {sku!r}.", sku=req.sku) if req.sku
                           else phrase("A SKU is needed."), sorted(c.sku_by_id))
    regions = sorted(o.region for o in c.offers if o.sku == req.sku)
    if not req.region or c.offer(req.sku, req.region) is None:
        raise InvalidInput(
            "region",
            phrase("{sku} is not offered in {region!r}.", sku=req.sku, region=req.region)
            if req.region else phrase("A region is needed."),
            regions,
        )
    offer = c.offer(req.sku, req.region)
    assert offer is not None
    term = req.term or Term.MONTH.value
    if term not in {t.value for t in BARE_METAL_TERMS}:
        raise InvalidInput("term", "Bare metal is not leased by the {term!r}.",
                           [t.value for t in BARE_METAL_TERMS], term=term)
    if req.kind == "bare_metal" and req.nodes != 1:
        raise InvalidInput("nodes", "A bare-metal order is one node; order a cluster for more.",
                           ["1"])
    if req.kind == "cluster" and not 1 <= req.nodes <= MAX_CLUSTER_NODES:
        raise InvalidInput("nodes", "Node count must be a whole number from 1 to "
                           "{max_cluster_nodes}, not {req_nodes}.", None,
                           max_cluster_nodes=MAX_CLUSTER_NODES, req_nodes=req.nodes)
    if req.gpus is not None:
        raise InvalidInput("gpus", "GPU count is fixed by the SKU for bare metal; leave it out.")
    sku = c.sku_by_id[req.sku]
    if req.image and req.image.startswith(PREFIX):
        raise InvalidInput("image", "A saved image starts a container; a server takes an OS "
                           "image (`gpulease images`).")
    image = _image(p, req.image or offer.default_image, c.gpu_by_id[sku.gpu].vendor)
    for addon_id, qty in req.add.items():
        try:
            check_addon(c, addon_id, qty)
        except PricingError as exc:
            raise InvalidInput(exc.field, exc.phrase, exc.accepted) from None
    if req.restore is not None and req.kind != "bare_metal":
        raise InvalidInput("restore", "A snapshot is restored at delivery onto one server: "
                           "order bare metal, or restore onto a cluster's servers after "
                           "delivery with `gpulease restore`.")
    return Plan(req.kind, req.sku, req.region, term, image, req.nodes,
                req.nodes * sku.gpu_count, keys, None, req.name,
                add=tuple(sorted(req.add.items())), restore=req.restore,
                encrypted_data=req.encrypted_data)


def _image(p: Priced, image_id: str, vendor: str) -> str:
    image = p.catalog.image_by_id.get(image_id)  # the common case needs no query
    if image is None or image.gpu_vendor not in ("any", vendor):
        with p.db.read() as s:
            image = find_image(s, p, image_id)
            fitting = sorted(i.id for i in all_images(s, p) if i.gpu_vendor in ("any", vendor))
        if image is None:
            raise InvalidInput("image", "Unknown image {image_id!r}.", fitting, image_id=image_id)
        if image.id not in fitting:
            raise InvalidInput("image", "Image {image_id!r} does not run on {vendor} GPUs.",
                               fitting, image_id=image_id, vendor=vendor)
    return image.id


def last_ssh_keys(p: Records, actor: Principal) -> str:
    """The SSH keys of the user's latest order, to start the next one with (empty: none)."""
    with p.db.read() as s:
        keys = s.scalar(select(Instance.ssh_keys).where(
            Instance.created_by == actor.user_id, Instance.tenant_id == actor.tenant_id)
            .order_by(Instance.ordered_at.desc()).limit(1))
    return keys or ""


def place_order(
    p: Platform, actor: Principal, req: OrderRequest, idempotency_key: str | None = None
) -> tuple[InstanceView, bool]:
    """Returns (instance, created). A repeated Idempotency-Key returns the first answer."""
    tenant = actor.require_order_rights()
    plan = plan_order(p, req)
    idem = idem_for(idempotency_key, "order", req)
    if idem is not None:
        stored = replay(p, actor, idem, InstanceView)
        if stored is not None:
            return stored, False
    unserved = sites.unserved(p, plan.region)
    if unserved is not None:  # nothing would deploy it: say so now, hold no money
        raise Unavailable(unserved)
    for _ in range(CLAIM_RETRIES):
        try:
            with p.db.write() as s:
                view = _place(s, p, actor, tenant, plan)
                if idem is not None:
                    remember(s, p, actor, idem, view)
            p.wake()
            return view, True
        except Raced:
            continue
        except OperationalError as exc:
            if "deadlock" not in str(exc).lower():
                raise
            continue  # PostgreSQL broke a lock cycle; retry with fresh data
        except IntegrityError:
            if idem is not None:
                stored = replay(p, actor, idem, InstanceView)
                if stored is not None:
                    return stored, False
            continue  # a GPU was taken under us: the unique index said no; retry
    raise OutOfStock(
        "Too many concurrent orders competed for the same nodes; retry in a moment."
    )


_INSERT_INSTANCE = insert(Instance)
_NEW_INSTANCE = initial(Instance, INSTANCE) | initial(Instance, INSTANCE_STAGE)
_INSERT_EVENTS = insert(Event)


def _place(s: Session, p: Platform, actor: Principal, tenant: str, plan: Plan) -> InstanceView:
    """One order's transaction: the instance, its nodes or GPUs, its history and the hold on
    its first period; any refusal (409 stock, 402 money) rolls all of it back."""
    now = p.clock.now()
    limits = refuse_orders_unless_active(s, tenant)
    conn = s.connection()
    fabric = None
    if plan.kind == "cluster":
        groups = free_per_fabric(s, plan.sku, plan.region)
        fabric = pick_fabric(groups, plan.nodes)
        if fabric is None:
            raise OutOfStock(_cluster_shortage(plan, groups))
    values = _instance_row(p, actor, tenant, plan, now, fabric)
    if plan.saved_image is not None:
        image = for_order(s, tenant, plan.saved_image)
        values["image_id"], values["saved_image_id"] = image.base_image_id, image.id
    values["encrypted_data"] = plan.encrypted_data
    if plan.restore is not None and plan.encrypted_data:
        raise InvalidInput("restore", "A snapshot cannot be restored onto a disk only you "
                           "can unlock: restore it yourself after `gpulease agent "
                           "encrypt-data` (`gpulease agent restore`).")
    if plan.restore is not None:
        if p.object_store() is None:
            raise Conflict("Object storage is not set up on this platform, so no snapshot "
                           "can be restored; order without --restore.")
        source = find_snapshot(s, tenant, plan.restore, "restore")
        values["restore_from"] = f"{source.instance_id}/{source.snapshot_id}"
    conn.execute(_INSERT_INSTANCE, values)  # first: the claims below refer to it
    inst = Instance(**values)  # not added to the session: read for the price and the answer
    who = by(actor)
    events: list[dict[str, object]] = [
        {"at": now, "resource": "instance", "resource_id": inst.id, "instance_id": inst.id,
         "kind": "stage", "from_value": None, "to_value": inst.stage, "message": None,
         "actor": who}]
    if plan.kind == "container":
        free = free_gpus_by_node(s)
        host = claim_container_slice(s, plan.offered, plan.gpus, inst.id, now, free)
        if host is None:
            raise OutOfStock(_container_shortage(s, plan, free))
        claimed = [host]
    else:
        claimed = _claim_nodes(s, p, plan, inst.id, fabric, now)
        held = hold_gpus(conn, [c.id for c in claimed], inst.id, now)
        for c in claimed:
            c.gpus = held[c.id]
        events += node_claim_events(claimed, inst.id, now, who)
    conn.execute(_INSERT_EVENTS, events)
    if limits.gpu_quotas:  # after the claims, as the wallet below: the lock order as ever
        check_order(s, tenant, plan.sku, plan.region, plan.gpus)
    extra = addons.attach_at_order(s, p, inst, dict(plan.add), now, who) if plan.add else 0
    hold_first_period(s, p, inst, now, Decimal(extra))
    if limits.budget is not None:  # its money held, under the wallet's lock
        check_spend(s, p, tenant, limits.budget, phrase("order"), now)
    return assemble_view(p, inst, [(c, c.gpus, True) for c in claimed],
                         [Event(**e) for e in events])


def _instance_row(p: Sealed, actor: Principal, tenant: str, plan: Plan, now: datetime,
                  fabric: str | None) -> dict[str, object]:
    return {
        "id": new_id("i"), "tenant_id": tenant, "created_by": actor.user_id, "kind": plan.kind,
        "sku": plan.sku, "region": plan.region, "container_offer": plan.container_offer,
        "term": plan.term, "image_id": plan.image, "node_count": plan.nodes,
        "gpu_count": plan.gpus, "fabric_id": fabric, "ssh_keys": "\n".join(plan.ssh_keys),
        "name": plan.name, "password_login": plan.password_login, **_NEW_INSTANCE,
        "root_password_enc": p.box.seal(new_root_password()), "ordered_at": now,
        "next_attempt_at": now, "attempts": 0, "stage_started_at": now,
        "stage_polls": 0, "stage_requests": 0, "metered_hours": 0,
    }


def _claim_nodes(s: Session, p: Priced, plan: Plan, instance_id: str, fabric: str | None,
                 now: datetime) -> list[Claimed]:
    conn = s.connection()
    if plan.kind == "bare_metal":
        node = claim_bare_metal(conn, plan.offered, instance_id, now)
        if node is None:
            raise OutOfStock(_bare_metal_shortage(s, p, plan))
        return [node]
    assert fabric is not None
    return claim_cluster(conn, plan.offered, fabric, plan.nodes, instance_id, now)


def _bare_metal_shortage(s: Session, p: Priced, plan: Plan) -> Phrase:
    stock = bare_metal_stock(s)
    gpu = p.catalog.sku_by_id[plan.sku].gpu
    elsewhere = [
        f"{o.sku} in {o.region}: {stock.get((o.sku, o.region), 0)}"
        for o in p.catalog.offers
        if p.catalog.sku_by_id[o.sku].gpu == gpu and (o.sku, o.region) != (plan.sku, plan.region)
    ]
    free_any = [f"{sku} in {region}: {n}" for (sku, region), n in sorted(stock.items()) if n]
    if elsewhere:
        return phrase("No free {sku} node in {region} (0 free); same GPU elsewhere: "
                      "{elsewhere}. Free now: {free}. Pick another region or SKU, or retry "
                      "later.", sku=plan.sku, region=plan.region, elsewhere=", ".join(elsewhere),
                      free=", ".join(free_any) or phrase("nothing"))
    return phrase("No free {sku} node in {region} (0 free). Free now: {free}. Pick another "
                  "region or SKU, or retry later.", sku=plan.sku, region=plan.region,
                  free=", ".join(free_any) or phrase("nothing"))


def _container_shortage(s: Session, plan: Plan, free: dict[str, int]) -> Phrase:
    hosts = s.scalars(select(Node.id).where(Node.id.in_(list(free)), Node.sku == plan.sku,
                                            Node.region == plan.region)).all() if free else []
    most = max((free[n] for n in hosts), default=0)
    return phrase("No shared {sku} host in {region} has {gpus} free GPUs (the most free on "
                  "one host: {most}). Order fewer GPUs or retry later.", sku=plan.sku,
                  region=plan.region, gpus=plan.gpus, most=most)


def _cluster_shortage(plan: Plan, by_fabric: dict[str, int]) -> Phrase:
    groups = ", ".join(f"{f}: {n}" for f, n in sorted(by_fabric.items())) or phrase("none")
    largest = max(by_fabric.values(), default=0)
    return phrase("Need {nodes} free {sku} nodes on one InfiniBand fabric in {region}; free "
                  "nodes per fabric: {groups} (largest group {largest}). Order at most "
                  "{largest} nodes, another region, or retry later.", nodes=plan.nodes,
                  sku=plan.sku, region=plan.region, groups=groups, largest=largest)
