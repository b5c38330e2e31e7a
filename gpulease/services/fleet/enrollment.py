"""Enrolling a server by its BMC: check the credentials, read the inventory, compare it
with the offer. A match is powered off and made available; a mismatch stays in enrolling
with a report that says what differs. A BMC that refuses or cannot be reached writes
nothing and answers with the BMC's own message. A server is its BMC endpoint (however the
URL is spelled), its system UUID and its serial: a second enrollment of the same server is
a 409 naming the node, and nothing that changes the server (power) happens before every
check has passed."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpulease.db.tables import Node
from gpulease.domain.accounts import Principal
from gpulease.domain.catalog import Offer
from gpulease.domain.errors import BadGateway, Conflict, InvalidInput
from gpulease.domain.fleet.enrollment import (
    Facts,
    GpuLink,
    GpuModel,
    bmc_key,
    compare,
    identity,
    nothing_checkable,
)
from gpulease.domain.phrases import phrase
from gpulease.domain.states import NodeStatus
from gpulease.drivers.redfish import Inventory, RedfishBmc, split_address
from gpulease.ports.bmc import BmcEndpoint, BmcError, BmcPermanentError
from gpulease.ports.records import Driven, Priced
from gpulease.schemas import EnrollRequest, NodeView
from gpulease.services.fleet.fabrics import fabric_named, rack_named
from gpulease.services.fleet.inventory import NodeSpec, add_node, get_node
from gpulease.services.platform.idempotency import Idem, run_once
from gpulease.services.platform.sites import media_base


class _NodeId(BaseModel):
    id: str


# The catalog's GPU vendor ids, as the BMC lookup tables spell the vendor.
VENDOR_NAMES = {"nvidia": "NVIDIA", "huawei": "Huawei"}


def _offer(p: Priced, offer_id: str | None) -> Offer | None:
    if offer_id is None:
        return None
    offer = p.catalog.offer_by_id.get(offer_id)
    if offer is None:
        raise InvalidInput("offer", "Unknown offer {offer_id!r} (SKU@region).",
                           sorted(p.catalog.offer_by_id), offer_id=offer_id)
    return offer


def facts_of(inv: Inventory) -> Facts:
    hot = tuple(
        f"{t.name} {t.celsius:g} °C" + (f" (critical {t.upper_critical:g} °C)"
                                        if t.upper_critical is not None else "")
        + (f", health {t.health}" if t.health not in (None, "OK") else "")
        for t in inv.temperatures or ()
        if (t.celsius is not None and t.upper_critical is not None
            and t.celsius >= t.upper_critical) or t.health not in (None, "OK"))
    return Facts(
        memory_gib=inv.memory_gib,
        drive_count=len(inv.drives) if inv.drives is not None else None,
        drive_bytes=tuple(d.capacity_bytes or 0 for d in inv.drives) if inv.drives else None,
        nic_count=len(inv.nic_macs) if inv.nic_macs is not None else None,
        gpu_count=len(inv.gpus) if inv.gpus is not None else None,
        gpu_vendors=tuple(g.vendor for g in inv.gpus or () if g.vendor),
        gpu_links=tuple(GpuLink(d.name or d.model or "GPU", d.gen, d.lanes, d.max_gen,
                                d.max_lanes)
                        for d in inv.pcie_devices or () if d.kind == "gpu"),
        hot=hot,
        gpu_models=tuple(g.model for g in inv.gpus or () if g.model),
        virtual_media=inv.virtual_media, media_one_slot=inv.media_one_slot,
        media_protocols=inv.media_protocols, boot_targets=inv.boot_targets,
        warnings=inv.warnings, cpu_sockets=inv.processor_count, cpu_cores=inv.cpu_cores,
        cpu_threads=inv.cpu_threads, cpu_model=inv.processor_model,
    )


def _refuse_same_server(s: Session, key: str | None, uuid: str | None, serial: str | None,
                        name: str | None = None) -> None:
    """409 when an enrolled node is this server (its BMC address however spelled, its
    system UUID, its serial), naming it; or when `name` is another server's. One query."""
    checks: list[tuple[Any, str]] = [(Node.bmc_key == key, "BMC address")] if key else []
    if uuid:
        checks.append((Node.system_uuid == uuid, f"system UUID {uuid}"))
    if serial:
        checks.append((func.lower(Node.serial) == serial, f"serial {serial}"))
    wanted = [c for c, _ in checks] + ([Node.name == name] if name else [])
    if not wanted:
        return
    rows = s.execute(select(Node.id, Node.name, Node.status, Node.bmc_key, Node.system_uuid,
                            func.lower(Node.serial))
                     .where(or_(*wanted), Node.status != NodeStatus.DELETED.value)
                     .limit(10)).all()
    for node_id, node_name, status, k, u, ser in rows:
        for what in ("BMC address" if key and k == key else None,
                     f"system UUID {uuid}" if uuid and u == uuid else None,
                     f"serial {serial}" if serial and ser == serial else None):
            if what:
                raise Conflict("This server is enrolled already as node {node_name} "
                               "({node_id}, {status}): same {what}. Nothing was changed; "
                               "see `gpulease nodes`.",
                               node_name=node_name, node_id=node_id, status=status, what=what)
    if name and any(row[1] == name for row in rows):
        raise Conflict("A node named {name} exists already (another server); pass --name.",
                       name=name)


def enroll(p: Driven, actor: Principal, req: EnrollRequest,
           idem: Idem | None = None) -> NodeView:
    actor.require_operator()
    offer = _offer(p, req.offer)
    if req.runtime and req.pool != "container":
        raise InvalidInput("runtime", "Only a shared (container) server has a Docker engine "
                           "URL; leave it out, or enroll the server into the container pool.")
    if req.pool == "container" and req.agent == "gpulease" and not req.runtime:
        raise InvalidInput("runtime", "A shared (container) server needs its Docker engine URL "
                           "(e.g. tcp://10.0.0.5:2376 or ssh://root@10.0.0.5): tenants' "
                           "containers run there.")
    try:
        split_address(req.bmc)
    except BmcPermanentError as exc:
        raise InvalidInput("bmc", str(exc)) from None
    key = bmc_key(req.bmc)
    with p.db.read() as s:  # before the BMC is asked anything
        _refuse_same_server(s, key, None, None)
        _place(s, req, offer.region if offer else None)

    bmc = p.drivers.bmc_for("redfish", BmcEndpoint(req.name or req.bmc, req.bmc,
                                                  req.username, req.password))
    assert isinstance(bmc, RedfishBmc)
    try:
        inv = bmc.inventory()
    except BmcPermanentError as exc:
        raise InvalidInput("bmc", "{exc}. Check the address and credentials.", exc=exc) from None
    except BmcError as exc:
        raise BadGateway("{exc}. Retry when the BMC answers.", exc=exc) from None

    uuid, serial = identity(inv.uuid), identity(inv.serial)
    name = req.name or _default_name(inv)
    with p.db.read() as s:  # every check before anything changes on the server
        _refuse_same_server(s, key, uuid, serial, name)
    facts = facts_of(inv)
    if nothing_checkable(facts):
        raise InvalidInput("bmc", "The BMC at {req_bmc} reports no memory, GPUs, drives or "
                           "NICs, so nothing shows the server is what the offer sells. Give "
                           "the BMC user inventory rights (or update its firmware) and enroll "
                           "again; nothing was changed.", req_bmc=req.bmc)
    if offer is None:
        offer = _guess_offer(p, facts)
        with p.db.read() as s:
            _place(s, req, offer.region)
    facts = replace(facts, media_scheme=urlsplit(media_base(p, offer.region)).scheme or None)
    sku = p.catalog.sku_by_id[offer.sku]
    gpu = p.catalog.gpu_by_id[sku.gpu]
    result = compare(offer, facts, sku.gpu_count, VENDOR_NAMES.get(gpu.vendor, gpu.vendor),
                     GpuModel(gpu.name, gpu.memory_gb))
    status, reason = NodeStatus.AVAILABLE, None
    if not result.matches:
        status, reason = NodeStatus.ENROLLING, result.report()
    elif inv.power != "Off":  # read a moment ago: no second read when it is off already
        try:
            bmc.power_off()  # idle until ordered; the deploy powers it on
        except BmcError as exc:
            status, reason = NodeStatus.ENROLLING, f"inventory matches, but power off failed: {exc}"
    record = {"bmc": asdict(inv), "comparison": {
        "offer": offer.id, "matches": result.matches, "differences": list(result.differences),
        "unchecked": list(result.unchecked), "checked": list(result.checked),
        "notes": list(result.notes)}}

    def create(s: Session) -> _NodeId:
        _refuse_same_server(s, key, uuid, serial, name)  # one enrolled at the same moment
        _place(s, req, offer.region)
        node = add_node(s, p, NodeSpec(
            name=name, sku=offer.sku, region=offer.region, pool=req.pool,
            serial=inv.serial or "", fabric_id=req.fabric, rack_id=req.rack,
            bmc_driver="redfish", bmc_address=req.bmc, bmc_username=req.username,
            bmc_password=req.password, status=status, status_reason=reason,
            inventory_json=json.dumps(record), agent_kind=req.agent, runtime_url=req.runtime,
            boot_address=str(req.boot_address) if req.boot_address else None,
            ssh_endpoint=req.ssh_endpoint,
            system_uuid=uuid))
        s.flush()
        return _NodeId(id=node.id)

    node_id = run_once(p, actor, idem, _NodeId, create)[0].id
    return get_node(p, actor, node_id)


def _place(s: Session, req: EnrollRequest, region: str | None) -> None:
    """The rack and fabric named exist (in the offer's region): checked before the server
    is touched."""
    if req.rack:
        rack_named(s, req.rack, region)
    if req.fabric:
        fabric_named(s, req.fabric, region)


def _default_name(inv: Inventory) -> str:
    base = inv.serial or inv.system_id
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in base)[:100]


def _guess_offer(p: Priced, facts: Facts) -> Offer:
    fits = [o for o in p.catalog.offers if compare(o, facts).matches]
    if len(fits) == 1:
        return fits[0]
    raise InvalidInput(
        "offer",
        phrase("Cannot tell which offer this server is from what its BMC reports ({fits} "
               "offers fit); pass the offer.", fits=len(fits)) if fits else
        phrase("Cannot tell which offer this server is from what its BMC reports (no offer "
               "fits); pass the offer."), sorted(p.catalog.offer_by_id))

