"""A tenant's instances as it reads them: one view (nodes, stages), a page of them, the page's
JSON kept per unchanged summary, and the change marker a follower reads."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple, cast

from sqlalchemy import Executable, Row, bindparam, func, select
from sqlalchemy.orm import Session

from gpulease.db.repositories import (
    NodeBrief,
    allocations_of,
    events_of,
    get_instance,
    instance_events,
    scoped_to_tenant,
)
from gpulease.db.tables import Event, Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.domain.ssh import ssh_address
from gpulease.domain.states import DEPLOY_ORDER, InstanceStatus, NodeStage
from gpulease.lifecycle.history import reason_phrase
from gpulease.ports.records import Driven, Records
from gpulease.schemas import (
    InstanceNodeView,
    InstanceView,
    Page,
    StageView,
    trusted,
)
from gpulease.services.agents.node_agent import is_simulated
from gpulease.services.orders.placement import Claimed

# What a node the instance no longer holds shows as its status in the instance's view.
LET_GO = "released"
# An instance as its view reads it: the whole row, or a page's VIEW_COLUMNS.
InstanceFacts = Instance | Row[Any]


def ssh_command(inst: InstanceFacts) -> str | None:
    if not inst.ip_address:
        return None
    port = f"-p {inst.ssh_port} " if inst.ssh_port and inst.ssh_port != 22 else ""
    return f"ssh {port}root@{inst.ip_address}"


def _node_ssh(inst: InstanceFacts, node: Node | Claimed | NodeBrief, held: bool
              ) -> str | None:
    """A bare-metal server's own `ssh` line once delivered (each node of a cluster)."""
    if not held or node.instance_id != inst.id or not node.ip_address \
            or inst.kind == "container" or inst.status != InstanceStatus.READY.value:
        return None
    host, port = ssh_address(node.ip_address, node.ssh_endpoint)
    return f"ssh {f'-p {port} ' if port != 22 else ''}root@{host}"


def _current_stage(inst: InstanceFacts, node_stages: list[str | None]) -> str | None:
    if inst.status == InstanceStatus.DEPLOYING.value and node_stages:
        # The instance is as far along as its slowest node.
        order = {st.value: i for i, st in enumerate(DEPLOY_ORDER)}
        known = [st for st in node_stages if st in order]
        if known:
            return min(known, key=lambda st: order[st])
    return inst.stage


def instance_view(s: Session, p: Driven, inst: Instance) -> InstanceView:
    # the nodes' columns the view shows, not whole rows (a node row is wide)
    allocations = allocations_of(s, [inst.id])[inst.id]
    return assemble_view(p, inst, allocations, instance_events(s, inst.id))


def assemble_view(
    p: Driven, inst: InstanceFacts,
    allocations: Sequence[tuple[Node | Claimed | NodeBrief, list[int], bool]],
    events: Sequence[Event],
) -> InstanceView:
    """The instance as its owner sees it, from its row, the nodes it held (with GPU indices,
    and whether held now; loaded, or as an order's claim returned them) and its history."""
    names = {node.id: node.name for node, _, _ in allocations}
    if any(held for _, _, held in allocations):  # the servers it runs on; one swapped out
        allocations = [a for a in allocations if a[2]]  # is in its history, not listed
    # Built without validation (trusted): every value comes from the database with its
    # column's type, and a page builds fifty of these.
    nodes = [
        trusted(InstanceNodeView,
            id=node.id, name=node.name, status=node.status if held else LET_GO,
            stage=node.stage if held and node.instance_id == inst.id else None,
            # the address once the instance was delivered: not while its acceptance runs
            ip_address=node.ip_address if held and node.instance_id == inst.id
            and inst.ready_at is not None else None,
            gpus=gpus, ssh_command=_node_ssh(inst, node, held),
        )
        for node, gpus, held in allocations
    ]
    # Stages, errors along the way, and a failure with its reason.
    stages = [
        StageView(
            stage={"error": f"{e.to_value} (retry)", "result": f"{e.to_value} result"}.get(
                e.kind, e.to_value or e.kind),
            at=e.at, message=e.message, phrase=e.phrase,
            node=names.get(e.resource_id) if e.resource == "node" else None,
        )
        for e in events
        if e.kind in ("stage", "error", "result", "note") and e.to_value != NodeStage.IDLE
    ]
    delivery = (inst.ready_at - inst.ordered_at).total_seconds() if inst.ready_at else None
    return trusted(
        InstanceView,
        id=inst.id, tenant_id=inst.tenant_id, name=inst.name, kind=inst.kind,
        status=inst.status, status_reason=inst.status_reason, status_phrase=reason_phrase(
            (e for e in reversed(events) if e.resource == "instance"), inst.status,
            inst.status_reason),
        stage=_current_stage(inst, [n.stage for n in nodes if n.status != LET_GO]),
        sku=inst.sku, region=inst.region, container_offer=inst.container_offer,
        term=inst.term, image=inst.image_id, node_count=inst.node_count,
        gpu_count=inst.gpu_count, fabric_id=inst.fabric_id, nodes=nodes,
        ip_address=inst.ip_address, ssh_command=ssh_command(inst),
        ordered_at=inst.ordered_at, ready_at=inst.ready_at, released_at=inst.released_at,
        delivery_seconds=delivery, delivery_sla_seconds=p.settings.delivery_sla_s,
        stages=stages, ssh_password=bool(inst.password_login),
        credentials_available=bool(
            inst.status == InstanceStatus.READY.value
            and inst.credentials_revealed_at is None and inst.root_password_enc is not None
        ),
        simulated=any(is_simulated(p, node.bmc_driver, node.agent_kind)
                      for node, _, _ in allocations),
    )


EXPANSIONS = ("stages",)
# What assemble_view reads of an instance: a page reads these columns only, as rows rather
# than ORM objects (the rest of the row, the worker's bookkeeping and the tenant's keys, is
# half its width, and building objects costs more than the query).
VIEW_COLUMNS = (Instance.id, Instance.tenant_id, Instance.name, Instance.kind,
                Instance.status, Instance.status_reason, Instance.stage, Instance.sku,
                Instance.region, Instance.container_offer, Instance.term, Instance.image_id,
                Instance.node_count, Instance.gpu_count, Instance.fabric_id,
                Instance.ip_address, Instance.ssh_port, Instance.ordered_at,
                Instance.ready_at, Instance.released_at, Instance.password_login,
                Instance.credentials_revealed_at, Instance.root_password_enc)


@cache
def _page_statements(by_tenant: bool, by_status: bool) -> tuple[Executable, Executable]:
    """A page's rows, each with the count of all the rows it is a page of (a window over
    the same filter: one statement), and that count alone for a page past the end; built
    once per shape (a tenant's instances or every one, as instances_query scopes them; with
    or without a status), values bound at each call."""
    where = [cond for cond, wanted in (
        (Instance.tenant_id == bindparam("tenant_id"), by_tenant),
        (Instance.status == bindparam("wanted_status"), by_status)) if wanted]
    count = select(func.count(Instance.id)).where(*where)
    page = (select(*VIEW_COLUMNS, func.count().over().label("matching")).where(*where)
            .order_by(Instance.ordered_at.desc(), Instance.id)
            .limit(bindparam("limit")).offset(bindparam("offset")))
    return count, page


def list_instances(
    p: Driven, actor: Principal, *, status: str | None = None, limit: int = 50,
    offset: int = 0, expand: str | None = None,
) -> Page[InstanceView]:
    """A page of instances in a constant number of statements (the page with its total,
    the nodes of all of it; with `expand="stages"` their histories): each item a summary
    (status, current stage, nodes, IP, times) whose `stages` list is empty unless
    expanded. One instance's whole history: show_instance."""
    return _views(p, _read_page(p, actor, status, limit, offset, expand), limit, offset)


def list_instances_json(
    p: Driven, actor: Principal, *, status: str | None = None, limit: int = 50,
    offset: int = 0, expand: str | None = None,
) -> str:
    """list_instances as the API sends it (the same bytes as its page's JSON). A summary
    is a function of its instance's row, the nodes it held and two settings, so each
    summary's JSON is kept by those and an instance that did not change since the last
    page is not built and serialized again: a poller's page costs its statements."""
    found = _read_page(p, actor, status, limit, offset, expand)
    if expand is not None:
        return _views(p, found, limit, offset).model_dump_json()
    items = [_summary_json(p, inst, found.allocations[inst.id]) for inst in found.rows]
    empty = Page[InstanceView](items=[], total=found.total, limit=limit,
                               offset=offset).model_dump_json()
    return empty.replace('"items":[]', '"items":[' + ",".join(items) + "]", 1)


class _PageRead(NamedTuple):
    rows: list[Row[Any]]
    total: int
    allocations: dict[str, list[tuple[NodeBrief, list[int], bool]]]
    events: dict[str, list[Event]]


def _views(p: Driven, found: _PageRead, limit: int, offset: int) -> Page[InstanceView]:
    return Page(items=[assemble_view(p, inst, found.allocations[inst.id],
                                     found.events[inst.id]) for inst in found.rows],
                total=found.total, limit=limit, offset=offset)


def _read_page(p: Records, actor: Principal, status: str | None, limit: int, offset: int,
               expand: str | None) -> _PageRead:
    if status is not None and status not in {st.value for st in InstanceStatus}:
        raise InvalidInput("status", "Unknown instance status {status!r}.",
                           [st.value for st in InstanceStatus], status=status)
    if expand is not None and expand not in EXPANSIONS:
        raise InvalidInput("expand", "Cannot expand {expand!r}; leave it out for "
                           "summaries, or ask for stages.", list(EXPANSIONS), expand=expand)
    count, page = _page_statements(scoped_to_tenant(actor), status is not None)
    values = {"tenant_id": actor.tenant_id, "wanted_status": status, "limit": limit,
              "offset": offset}
    with p.db.read() as s:
        rows = cast("list[Row[Any]]", s.execute(page, values).all())
        if rows:
            total = int(rows[0].matching)
        else:  # an empty page: none at all, or an offset past the end
            total = int(s.scalar(count, values) or 0) if offset else 0
        ids = [inst.id for inst in rows]
        allocations = allocations_of(s, ids)
        events = events_of(s, ids) if expand == "stages" else {i: [] for i in ids}
    return _PageRead(rows, total, allocations, events)


def _summary_json(p: Driven, inst: Row[Any],
                  allocations: list[tuple[NodeBrief, list[int], bool]]) -> str:
    """One summary's JSON, kept by everything it is made of: the row's VIEW_COLUMNS (of the
    encrypted root password only whether there is one), each node held as read, whether
    its hardware is simulated, and the delivery SLA."""
    row = tuple(inst)
    key = (row[:_SECRET], row[_SECRET] is not None, row[_SECRET + 1:len(VIEW_COLUMNS)],
           tuple((node, tuple(gpus), held) for node, gpus, held in allocations),
           tuple(is_simulated(p, node.bmc_driver, node.agent_kind)
                 for node, _, _ in allocations),
           p.settings.delivery_sla_s)
    kept = _summaries.get(key)
    if kept is None:
        kept = assemble_view(p, inst, allocations, []).model_dump_json()
        if len(_summaries) >= _SUMMARIES_KEPT:
            _summaries.clear()
        _summaries[key] = kept
    return kept


_SECRET = next(n for n, column in enumerate(VIEW_COLUMNS)
               if column is Instance.root_password_enc)
_SUMMARIES_KEPT = 4096  # a few KB each with its key: some MB at most per process
_summaries: dict[tuple[object, ...], str] = {}


def change_marker(p: Records, instance_id: str) -> tuple[object, ...]:
    """What changes whenever the instance's view does (status, stage, its nodes' stages,
    its history's length), in three small statements: a follower (GET …/events) reads this
    every half second and the whole view only when it moved. The caller has already
    shown the instance to this actor."""
    with p.db.read() as s:
        row = s.execute(select(Instance.status, Instance.stage, Instance.ip_address)
                        .where(Instance.id == instance_id)).one_or_none()
        counted = s.execute(select(func.count(Event.id), func.max(Event.at))
                            .where(Event.instance_id == instance_id)).one()
        nodes = tuple(s.scalars(select(Node.stage).where(Node.instance_id == instance_id)
                                .order_by(Node.name)))
    return (tuple(row) if row else None, tuple(counted), nodes)


def show_instance(p: Driven, actor: Principal, instance_id: str) -> InstanceView:
    with p.db.read() as s:
        return instance_view(s, p, get_instance(s, actor, instance_id))
