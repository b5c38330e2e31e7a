"""Fabrics and racks as the operator manages them: created with their type, speed and
place, listed with what is on them, changed, and deleted only when nothing is on them.
Enrollment and node updates name them; they are never invented on the way."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.tables import Fabric, Node, Rack
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.states import NodeStatus
from gpulease.ports.records import Priced, Records
from gpulease.schemas.fleet import (
    FabricCreate,
    FabricUpdate,
    FabricView,
    RackCreate,
    RackUpdate,
    RackView,
)

ON_FLEET = Node.status != NodeStatus.DELETED.value


def _region(p: Priced, region: str) -> None:
    if region not in p.catalog.region_by_id:
        raise InvalidInput("region", "Unknown region {region!r}.", sorted(p.catalog.region_by_id),
                           region=region)


def fabric_named(s: Session, fabric_id: str, region: str | None = None) -> Fabric:
    """The fabric, or a 422 saying how to create it (and that it must be in the region)."""
    fabric = s.get(Fabric, fabric_id)
    if fabric is None:
        known = sorted(s.scalars(select(Fabric.id)))
        raise InvalidInput("fabric", "No fabric {fabric_id!r}; create it first with "
                           "`gpulease fabric create` (its type and speed).", known,
                           fabric_id=fabric_id)
    if region is not None and fabric.region != region:
        raise InvalidInput("fabric", "Fabric {fabric_id} is in {actual}, not {region}.",
                           fabric_id=fabric_id, actual=fabric.region, region=region)
    return fabric


def rack_named(s: Session, rack_id: str, region: str | None = None) -> Rack:
    rack = s.get(Rack, rack_id)
    if rack is None:
        known = sorted(s.scalars(select(Rack.id)))
        raise InvalidInput("rack", "No rack {rack_id!r}; create it first with "
                           "`gpulease rack create`.", known, rack_id=rack_id)
    if region is not None and rack.region != region:
        raise InvalidInput("rack", "Rack {rack_id} is in {actual}, not {region}.",
                           rack_id=rack_id, actual=rack.region, region=region)
    return rack


def _fabric_view(f: Fabric, racks: int, nodes: int) -> FabricView:
    return FabricView(id=f.id, region=f.region, kind=f.kind, rate_gbps=f.rate_gbps,
                      racks=racks, nodes=nodes)


def list_fabrics(p: Records, actor: Principal) -> list[FabricView]:
    actor.require_operator()
    with p.db.read() as s:
        nodes = {k: n for k, n in s.execute(select(Node.fabric_id, func.count())
                                            .where(ON_FLEET).group_by(Node.fabric_id))}
        racks = {k: n for k, n in s.execute(select(Rack.fabric_id, func.count())
                                            .group_by(Rack.fabric_id))}
        return [_fabric_view(f, racks.get(f.id, 0), nodes.get(f.id, 0))
                for f in s.scalars(select(Fabric).order_by(Fabric.region, Fabric.id))]


def create_fabric(p: Priced, actor: Principal, body: FabricCreate) -> FabricView:
    actor.require_operator()
    _region(p, body.region)
    with p.db.write() as s:
        if s.get(Fabric, body.id) is not None:
            raise Conflict("Fabric {name} exists; change it with `gpulease fabric update`.",
                           name=body.id)
        fabric = Fabric(id=body.id, region=body.region, kind=body.kind,
                        rate_gbps=body.rate_gbps)
        s.add(fabric)
        s.flush()
        return _fabric_view(fabric, 0, 0)


def update_fabric(p: Records, actor: Principal, fabric_id: str,
                  body: FabricUpdate) -> FabricView:
    actor.require_operator()
    with p.db.write() as s:
        fabric = s.get(Fabric, fabric_id, with_for_update=True)
        if fabric is None:
            raise NotFound("No fabric {fabric_id}; `gpulease fabrics` lists them.",
                           fabric_id=fabric_id)
        if body.kind is not None:
            fabric.kind = body.kind
        if body.rate_gbps is not None:
            fabric.rate_gbps = body.rate_gbps
        s.flush()
        nodes = s.scalar(select(func.count()).select_from(Node).where(
            Node.fabric_id == fabric_id, ON_FLEET)) or 0
        racks = s.scalar(select(func.count()).select_from(Rack).where(
            Rack.fabric_id == fabric_id)) or 0
        return _fabric_view(fabric, racks, nodes)


def delete_fabric(p: Records, actor: Principal, fabric_id: str) -> None:
    actor.require_operator()
    with p.db.write() as s:
        fabric = s.get(Fabric, fabric_id, with_for_update=True)
        if fabric is None:
            raise NotFound("No fabric {fabric_id}; `gpulease fabrics` lists them.",
                           fabric_id=fabric_id)
        nodes = s.scalar(select(func.count()).select_from(Node).where(
            Node.fabric_id == fabric_id)) or 0
        racks = s.scalar(select(func.count()).select_from(Rack).where(
            Rack.fabric_id == fabric_id)) or 0
        if nodes or racks:
            raise Conflict("Fabric {fabric_id} still has {nodes} nodes and {racks} racks "
                           "; move them with "
                           "`gpulease node update --fabric` and `gpulease rack update` first.",
                           fabric_id=fabric_id, nodes=nodes, racks=racks)
        s.delete(fabric)


def _rack_view(r: Rack, nodes: int) -> RackView:
    return RackView(id=r.id, region=r.region, zone=r.zone, fabric=r.fabric_id,
                    leaf_switch=r.leaf_switch, nodes=nodes)


def list_racks(p: Records, actor: Principal, region: str | None = None) -> list[RackView]:
    actor.require_operator()
    with p.db.read() as s:
        nodes = {k: n for k, n in s.execute(select(Node.rack_id, func.count())
                                            .where(ON_FLEET).group_by(Node.rack_id))}
        q = select(Rack).order_by(Rack.region, Rack.id)
        if region:
            q = q.where(Rack.region == region)
        return [_rack_view(r, nodes.get(r.id, 0)) for r in s.scalars(q)]


def create_rack(p: Priced, actor: Principal, body: RackCreate) -> RackView:
    actor.require_operator()
    _region(p, body.region)
    with p.db.write() as s:
        if s.get(Rack, body.id) is not None:
            raise Conflict("Rack {name} exists; change it with `gpulease rack update`.",
                           name=body.id)
        if body.fabric:
            fabric_named(s, body.fabric, body.region)
        rack = Rack(id=body.id, region=body.region, zone=body.zone,
                    fabric_id=body.fabric or None, leaf_switch=body.leaf_switch)
        s.add(rack)
        s.flush()
        return _rack_view(rack, 0)


def update_rack(p: Records, actor: Principal, rack_id: str, body: RackUpdate) -> RackView:
    actor.require_operator()
    with p.db.write() as s:
        rack = s.get(Rack, rack_id, with_for_update=True)
        if rack is None:
            raise NotFound("No rack {rack_id}; `gpulease racks` lists them.", rack_id=rack_id)
        if body.zone is not None:
            rack.zone = body.zone
        if body.fabric is not None:
            rack.fabric_id = fabric_named(s, body.fabric, rack.region).id if body.fabric else None
        if body.leaf_switch is not None:
            rack.leaf_switch = body.leaf_switch or None
        s.flush()
        nodes = s.scalar(select(func.count()).select_from(Node).where(
            Node.rack_id == rack_id, ON_FLEET)) or 0
        return _rack_view(rack, nodes)


def delete_rack(p: Records, actor: Principal, rack_id: str) -> None:
    actor.require_operator()
    with p.db.write() as s:
        rack = s.get(Rack, rack_id, with_for_update=True)
        if rack is None:
            raise NotFound("No rack {rack_id}; `gpulease racks` lists them.", rack_id=rack_id)
        nodes = s.scalar(select(func.count()).select_from(Node).where(
            Node.rack_id == rack_id)) or 0
        if nodes:
            raise Conflict("Rack {rack_id} still holds {nodes} nodes; move them with "
                           "`gpulease node update --rack` first.", rack_id=rack_id, nodes=nodes)
        s.delete(rack)
