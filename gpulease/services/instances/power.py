"""Power actions a tenant takes on its own delivered instance: a bare-metal server rebooted
(the BMC asks its operating system to restart) or power cycled (the BMC resets it, for a
hung system), one server of a cluster or all of them; a container restarted on its engine.
Asked here, sent by the worker of the instance's site (worker/pipelines/power_actions.py),
one at a time per instance; the instance's history says who asked and what each server's
BMC answered. Nothing of the tenant's is erased, and the lease runs on."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import PowerAction
from gpulease.db.repositories import bound_nodes, get_instance, instance_allocations
from gpulease.db.tables import Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import (
    POWER_ACTION,
    InstanceStatus,
    NodeStatus,
    PowerActionStatus,
    PowerKind,
)
from gpulease.lifecycle.history import by, note
from gpulease.lifecycle.writer import initial
from gpulease.ports.records import Records
from gpulease.schemas import Page
from gpulease.schemas.fleet import PowerActionView
from gpulease.security import new_id

FOR_SERVERS = (PowerKind.REBOOT.value, PowerKind.POWER_CYCLE.value)
SHOWN = 20  # the newest actions an instance's list shows


def view(row: PowerAction) -> PowerActionView:
    return PowerActionView(id=row.id, instance_id=row.instance_id, action=row.kind,
                           node=row.node_name, status=row.status,
                           status_reason=row.status_reason or row.last_error,
                           sent_to=sorted(filter(None, row.sent_to.splitlines())),
                           requested_by=row.requested_by,
                           requested_at=row.requested_at, finished_at=row.finished_at)


def request_power(p: Records, actor: Principal, instance_id: str, action: str,
                  node: str | None = None) -> PowerActionView:
    """Queue `action` on the instance (one server of it when `node` names one); refused
    unless the instance is delivered, its servers are in service and no other action of
    it is still being sent."""
    tenant = actor.require_order_rights()
    now = p.clock.now()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        if inst.status != InstanceStatus.READY.value:
            raise Conflict("Instance {instance} is {status}; power actions are for a "
                           "delivered instance.", instance=inst.id, status=inst.status)
        _check_action(inst, action)
        targets = _targets(s, inst, node)
        busy = s.scalar(select(PowerAction.id).where(
            PowerAction.instance_id == inst.id,
            PowerAction.status == PowerActionStatus.QUEUED.value))
        if busy:
            raise Conflict("{busy} on {instance} is still being sent; `gpulease power "
                           "{instance}` shows it. Ask again once it is done.", busy=busy,
                           instance=inst.id)
        row = PowerAction(id=new_id("pwr"), tenant_id=tenant, instance_id=inst.id,
                          region=inst.region, kind=action, node_name=node,
                          requested_by=by(actor), requested_at=now, attempts=0, sent_to="",
                          next_attempt_at=now, **initial(PowerAction, POWER_ACTION))
        s.add(row)
        s.flush()
        note(s, now, inst.id, "power", phrase("{action} asked for ({servers})",
                                              action=Phrase(action), servers=", ".join(targets)),
             actor=by(actor))
        shown = view(row)
    p.wake()
    return shown


def _check_action(inst: Instance, action: str) -> None:
    if inst.kind == "container" and action != PowerKind.RESTART.value:
        raise InvalidInput("action", "{instance} is a container: it is restarted "
                           "(`restart`), not rebooted or power cycled.", instance=inst.id)
    if inst.kind != "container" and action not in FOR_SERVERS:
        raise InvalidInput("action", "{instance} is bare metal: `reboot` restarts its "
                           "operating system, `power_cycle` resets a hung server.",
                           instance=inst.id)


def servers_of(s: Session, inst: Instance, node: str | None) -> list[Node]:
    """The servers an action on the instance goes to: a container's host, or the
    instance's bound servers (only the one `node` names, when it names one). The
    power-actions pipeline sends to the same ones."""
    if inst.kind == "container":
        return [n for n, _gpus, _held in instance_allocations(s, inst.id)]
    return [n for n in bound_nodes(s, inst.id) if node is None or n.name == node]


def _targets(s: Session, inst: Instance, node: str | None) -> list[str]:
    """The names of the servers the action goes to; refused while one is out of service
    (a swap or a repair under way)."""
    if inst.kind == "container" and node is not None:
        raise InvalidInput("node", "A container runs on one server; leave `node` out.")
    nodes = servers_of(s, inst, node)
    if inst.kind == "container":
        return [n.name for n in nodes]
    if node is not None and not nodes:
        raise InvalidInput("node", "{node} is not a server of {instance}; `gpulease show "
                           "{instance}` lists them.", node=node, instance=inst.id)
    for n in nodes:
        _in_service(n)
    return [n.name for n in nodes]


def _in_service(node: Node) -> None:
    if node.status != NodeStatus.ACTIVE.value:
        raise Conflict("Server {node} is {status} (a swap, a repair or a deploy step is under "
                       "way); ask again once it is active.", node=node.name,
                       status=node.status)


def power_actions(p: Records, actor: Principal, instance_id: str, limit: int = SHOWN,
                  offset: int = 0) -> Page[PowerActionView]:
    """The instance's power actions, newest first, a page at a time."""
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        q = select(PowerAction).where(PowerAction.instance_id == inst.id)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(PowerAction.requested_at.desc(), PowerAction.id.desc())
                         .limit(limit).offset(offset))
        return Page(items=[view(r) for r in rows], total=total, limit=limit, offset=offset)
