"""Orders: validate, then claim nodes or GPUs in one transaction that cannot double-allocate.

Two guards, either enough on its own: every claim is a conditional UPDATE on the node's
generation (a claim based on a stale read updates nothing and is retried with fresh data),
and the partial unique index on active GPU allocations makes the database refuse a GPU
held twice. A cluster is claimed in one transaction: all its nodes or none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, func, insert, literal, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from gpulease.db.tables import Gpu, GpuAllocation, Instance, Node, UtcDateTime
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import BARE_METAL_TERMS, Term
from gpulease.domain.errors import InvalidInput, OutOfStock
from gpulease.domain.ssh import check_ssh_key
from gpulease.domain.states import InstanceStatus, NodeStatus
from gpulease.platform import Platform
from gpulease.schemas import InstanceView, OrderRequest
from gpulease.security import new_id, new_root_password
from gpulease.services.catalog import bare_metal_stock, free_gpus_by_node
from gpulease.services.idempotency import idem_for, remember, replay
from gpulease.services.images import all_images, find_image
from gpulease.services.instances import instance_view
from gpulease.services.status import claim_node, record_event
from gpulease.services.wallet import hold_first_period

MAX_CLUSTER_NODES = 256
CLAIM_RETRIES = 12


class _Raced(Exception):
    """A node changed between read and claim; retry the whole transaction."""


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


def plan_order(p: Platform, req: OrderRequest) -> Plan:
    """Check an order against the catalog; every error names the field and what is accepted."""
    c = p.catalog
    if not req.ssh_keys:
        raise InvalidInput(
            "ssh_keys", "Give at least one SSH public key (e.g. ~/.ssh/id_ed25519.pub)."
        )
    keys = tuple(check_ssh_key(k) for k in req.ssh_keys)
    if req.kind == "container":
        if not req.offer:
            raise InvalidInput("offer", "A container order needs an offer.",
                               sorted(c.container_offer_by_id))
        co = c.container_offer_by_id.get(req.offer)
        if co is None:
            raise InvalidInput("offer", f"Unknown container offer {req.offer!r}.",
                               sorted(c.container_offer_by_id))
        term = req.term or Term.HOUR.value
        if term != Term.HOUR.value:
            raise InvalidInput("term", f"Container instances are billed by the hour, not {term!r}.",
                               [Term.HOUR.value])
        gpus = req.gpus if req.gpus is not None else 1
        if not 1 <= gpus <= co.max_gpus:
            raise InvalidInput("gpus", f"A container takes 1 to {co.max_gpus} GPUs, not {gpus}.",
                               [str(n) for n in range(1, co.max_gpus + 1)])
        gpu = c.gpu_by_id[co.gpu]
        image = _image(p, req.image or co.default_image, gpu.vendor)
        return Plan("container", co.host_sku, co.region, term, image, 1, gpus, keys, co.id,
                    req.name)

    if not req.sku or req.sku not in c.sku_by_id:
        raise InvalidInput("sku", f"Unknown SKU {req.sku!r}." if req.sku else "A SKU is needed.",
                           sorted(c.sku_by_id))
    regions = sorted(o.region for o in c.offers if o.sku == req.sku)
    if not req.region or c.offer(req.sku, req.region) is None:
        raise InvalidInput(
            "region",
            f"{req.sku} is not offered in {req.region!r}." if req.region else "A region is needed.",
            regions,
        )
    offer = c.offer(req.sku, req.region)
    assert offer is not None
    term = req.term or Term.MONTH.value
    if term not in {t.value for t in BARE_METAL_TERMS}:
        raise InvalidInput("term", f"Bare metal is not leased by the {term!r}.",
                           [t.value for t in BARE_METAL_TERMS])
    if req.kind == "bare_metal" and req.nodes != 1:
        raise InvalidInput("nodes", "A bare-metal order is one node; order a cluster for more.",
                           ["1"])
    if req.kind == "cluster" and not 1 <= req.nodes <= MAX_CLUSTER_NODES:
        raise InvalidInput("nodes", f"Node count must be a whole number from 1 to "
                           f"{MAX_CLUSTER_NODES}, not {req.nodes}.", None)
    if req.gpus is not None:
        raise InvalidInput("gpus", "GPU count is fixed by the SKU for bare metal; leave it out.")
    sku = c.sku_by_id[req.sku]
    image = _image(p, req.image or offer.default_image, c.gpu_by_id[sku.gpu].vendor)
    return Plan(req.kind, req.sku, req.region, term, image, req.nodes,
                req.nodes * sku.gpu_count, keys, None, req.name)


def _image(p: Platform, image_id: str, vendor: str) -> str:
    image = p.catalog.image_by_id.get(image_id)  # the common case needs no query
    if image is None or image.gpu_vendor not in ("any", vendor):
        with p.db.read() as s:
            image = find_image(s, p, image_id)
            fitting = sorted(i.id for i in all_images(s, p) if i.gpu_vendor in ("any", vendor))
        if image is None:
            raise InvalidInput("image", f"Unknown image {image_id!r}.", fitting)
        if image.id not in fitting:
            raise InvalidInput("image", f"Image {image_id!r} does not run on {vendor} GPUs.",
                               fitting)
    return image.id


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
    for _ in range(CLAIM_RETRIES):
        try:
            with p.db.write() as s:
                inst = _new_instance(s, p, actor, tenant, plan)
                if plan.kind == "container":
                    _claim_container(s, p, plan, inst)
                else:
                    _claim_nodes(s, p, plan, inst)
                hold_first_period(s, p, inst, inst.ordered_at)  # 402 rolls all of it back
                view = instance_view(s, p, inst)
                if idem is not None:
                    remember(s, p, actor, idem, view)
            p.wake()
            return view, True
        except _Raced:
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


def _new_instance(s: Session, p: Platform, actor: Principal, tenant: str, plan: Plan) -> Instance:
    now = p.clock.now()
    inst = Instance(
        id=new_id("i"), tenant_id=tenant, created_by=actor.user_id, kind=plan.kind,
        sku=plan.sku, region=plan.region, container_offer=plan.container_offer,
        term=plan.term, image_id=plan.image, node_count=plan.nodes, gpu_count=plan.gpus,
        ssh_keys="\n".join(plan.ssh_keys), name=plan.name,
        status=InstanceStatus.PENDING.value, root_password_enc=p.box.seal(new_root_password()),
        ordered_at=now, next_attempt_at=now, attempts=0, stage="ordered",
        stage_started_at=now,
    )
    s.add(inst)
    s.flush()
    record_event(s, now, "instance", inst.id, "stage", instance_id=inst.id, to_value="ordered")
    return inst


def _allocate_gpus(
    s: Session, p: Platform, node_id: str, inst: Instance, count: int | None
) -> None:
    """Hold `count` free GPUs of the node (all of them when None) in one INSERT … SELECT.
    The partial unique index refuses here if a GPU is already held."""
    active = select(GpuAllocation.gpu_id).where(GpuAllocation.node_id == node_id,
                                                GpuAllocation.released_at.is_(None))
    free = (
        select(Gpu.id, Gpu.node_id, literal(inst.id), literal(p.clock.now(), UtcDateTime()))
        .where(Gpu.node_id == node_id, Gpu.id.not_in(active)).order_by(Gpu.index)
    )
    if count:
        free = free.limit(count)
    held = s.scalars(
        insert(GpuAllocation)
        .from_select(["gpu_id", "node_id", "instance_id", "created_at"], free)
        .returning(GpuAllocation.gpu_id)
    ).all()
    if count and len(held) != count:
        raise _Raced()


CANDIDATES = 64  # free nodes read per claim; concurrent orders spread over them at random


def _free(plan: Plan | Instance) -> list[ColumnElement[bool]]:
    return [Node.sku == plan.sku, Node.region == plan.region, Node.pool == "bare_metal",
            Node.status == NodeStatus.AVAILABLE.value, Node.drain_requested_at.is_(None)]


def _free_nodes_query(plan: Plan) -> Select[tuple[str, int]]:
    return select(Node.id, Node.generation).where(*_free(plan))


def _claim_nodes(s: Session, p: Platform, plan: Plan, inst: Instance) -> None:
    if plan.kind == "bare_metal":
        # Any 64 free nodes will do (no sort over the whole free pool).
        rows = s.execute(_free_nodes_query(plan).limit(CANDIDATES)).all()
        if not rows:
            raise OutOfStock(_bare_metal_shortage(s, p, plan))
        picked = [tuple(random.choice(rows))]
    else:
        groups = _free_per_fabric(s, plan)
        fitting = [f for f, n in groups.items() if n >= plan.nodes]
        if not fitting:
            raise OutOfStock(_cluster_shortage(plan, groups))
        # Best fit: the smallest fabric group that holds the cluster keeps big groups whole.
        smallest = min(groups[f] for f in fitting)
        fabric = random.choice([f for f in fitting if groups[f] == smallest])
        rows = s.execute(_free_nodes_query(plan).where(Node.fabric_id == fabric)
                         .limit(plan.nodes + CANDIDATES)).all()
        if len(rows) < plan.nodes:  # claimed by others since the count (READ COMMITTED)
            raise _Raced()
        picked = [tuple(r) for r in random.sample(rows, plan.nodes)]
        inst.fabric_id = fabric
    now = p.clock.now()
    # Claim in id order: two transactions wanting overlapping nodes then lock them in the
    # same order and one simply waits for the other (no deadlock on PostgreSQL).
    for node_id, gen in sorted(picked):
        if not claim_node(s, node_id, gen, now, to=NodeStatus.ALLOCATED, instance_id=inst.id):
            raise _Raced()
        _allocate_gpus(s, p, node_id, inst, None)


def _free_per_fabric(s: Session, plan: Plan) -> dict[str, int]:
    rows = s.execute(select(Node.fabric_id, func.count())
                     .where(*_free(plan), Node.fabric_id.is_not(None)).group_by(Node.fabric_id))
    return {fabric: n for fabric, n in rows if fabric}


def claim_replacement(s: Session, p: Platform, inst: Instance, failed: Node) -> Node | None:
    """In the caller's transaction, claim a free node of the instance's offer (on its fabric
    for a cluster) to replace one that failed during delivery; None when none is free."""
    q = select(Node.id, Node.generation).where(*_free(inst), Node.id != failed.id)
    if inst.kind == "cluster":
        q = q.where(Node.fabric_id == inst.fabric_id)
    rows = list(s.execute(q.limit(CANDIDATES)).all())
    random.shuffle(rows)
    now = p.clock.now()
    for node_id, gen in rows:
        if claim_node(s, node_id, gen, now, to=NodeStatus.ALLOCATED, instance_id=inst.id):
            _allocate_gpus(s, p, node_id, inst, None)
            return s.get(Node, node_id, populate_existing=True)
    return None


def _claim_container(s: Session, p: Platform, plan: Plan, inst: Instance) -> None:
    free = free_gpus_by_node(s)
    nodes = {
        n.id: n for n in s.scalars(select(Node).where(
            Node.id.in_(list(free)), Node.sku == plan.sku, Node.region == plan.region))
    } if free else {}
    fitting = [(free[n], n) for n in nodes if free[n] >= plan.gpus]
    if not fitting:
        most = max((free[n] for n in nodes), default=0)
        raise OutOfStock(
            f"No shared {plan.sku} host in {plan.region} has {plan.gpus} free GPUs "
            f"(the most free on one host: {most}). Order fewer GPUs or retry later."
        )
    least = min(f for f, _ in fitting)  # best fit: fill busy hosts first
    node = nodes[random.choice([n for f, n in fitting if f == least])]
    if not claim_node(s, node.id, node.generation, p.clock.now(), to=None, instance_id=None):
        raise _Raced()
    _allocate_gpus(s, p, node.id, inst, plan.gpus)


def _bare_metal_shortage(s: Session, p: Platform, plan: Plan) -> str:
    stock = bare_metal_stock(s)
    gpu = p.catalog.sku_by_id[plan.sku].gpu
    elsewhere = [
        f"{o.sku} in {o.region}: {stock.get((o.sku, o.region), 0)}"
        for o in p.catalog.offers
        if p.catalog.sku_by_id[o.sku].gpu == gpu and (o.sku, o.region) != (plan.sku, plan.region)
    ]
    free_any = [f"{sku} in {region}: {n}" for (sku, region), n in sorted(stock.items()) if n]
    hint = ("; same GPU elsewhere: " + ", ".join(elsewhere)) if elsewhere else ""
    return (
        f"No free {plan.sku} node in {plan.region} (0 free){hint}. "
        f"Free now: {', '.join(free_any) or 'nothing'}. Pick another region or SKU, "
        "or retry later."
    )


def _cluster_shortage(plan: Plan, by_fabric: dict[str, int]) -> str:
    groups = ", ".join(f"{f}: {n}" for f, n in sorted(by_fabric.items())) or "none"
    largest = max(by_fabric.values(), default=0)
    return (
        f"Need {plan.nodes} free {plan.sku} nodes on one InfiniBand fabric in {plan.region}; "
        f"free nodes per fabric: {groups} (largest group {largest}). Order at most {largest} "
        "nodes, another region, or retry later."
    )
