"""Changing an enrolled node: its name, rack, fabric and BMC credentials (new credentials
tried on the BMC first), and deleting it from the fleet. A node a tenant holds keeps its
fabric and is never deleted. Every change is a line in the node's history."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.agent.gpu.simulated import parse_faults
from gpulease.db.tables import GpuAllocation, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import BadGateway, Conflict, InvalidInput
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.domain.states import NODE, NODE_BUSY, NodeStatus
from gpulease.lifecycle.binding import fence
from gpulease.lifecycle.history import Happened, by, record_event
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.bmc import BmcEndpoint, BmcError, BmcPermanentError
from gpulease.ports.records import Driven
from gpulease.schemas import NodeView
from gpulease.schemas.fleet import NodeUpdate
from gpulease.services.agents.credentials import revoke_credential
from gpulease.services.agents.node_agent import is_simulated
from gpulease.services.fleet.fabrics import fabric_named, rack_named
from gpulease.services.fleet.inventory import get_node, load_node


def holds_tenant(s: Session, node: Node) -> bool:
    """The node is claimed, deploying or rented as a whole, or hosts containers."""
    return node.status in NODE_BUSY or node.instance_id is not None or bool(s.scalar(
        select(func.count()).where(GpuAllocation.node_id == node.id,
                                   GpuAllocation.released_at.is_(None))))


def _try_credentials(p: Driven, node: Node, username: str, password: str) -> None:
    """Ask the BMC something harmless with the new credentials (a 422 when it refuses them,
    a 502 when it does not answer); nothing is stored before this passes."""
    bmc = p.drivers.bmc_for(node.bmc_driver, BmcEndpoint(node.name, node.bmc_address,
                                                         username, password))
    try:
        bmc.power_state()
    except BmcPermanentError as exc:
        raise InvalidInput("bmc_password", "The BMC of {node_name} refused the new "
                           "credentials: {exc}. Nothing was changed.",
                           node_name=node.name, exc=exc) from None
    except BmcError as exc:
        raise BadGateway("The BMC of {node_name} did not answer: {exc}. Nothing was changed; "
                         "retry, or pass verify=false to store the credentials untried.",
                         node_name=node.name, exc=exc) \
            from None


def update_node(p: Driven, actor: Principal, node_id: str, body: NodeUpdate) -> NodeView:
    actor.require_operator()
    if body.bmc_username is not None and body.bmc_password is None:
        raise InvalidInput("bmc_password", "Give the BMC password with the user name "
                           "(both are tried together).")
    with p.db.read() as s:
        node = load_node(s, node_id, lock=False)
        if node.status == NodeStatus.DELETED.value:
            raise Conflict("Node {node_name} was deleted; enroll the server again.",
                           node_name=node.name)
        username = body.bmc_username or node.bmc_username
        if body.bmc_password is not None and body.verify:
            s.expunge(node)
            _try_credentials(p, node, username, body.bmc_password)
    changes: list[Phrase] = []
    with p.db.write() as s:
        node = load_node(s, node_id)
        now = p.clock.now()
        if body.name is not None and body.name != node.name:
            if s.scalar(select(Node.id).where(Node.name == body.name)) is not None:
                raise Conflict("A node named {name} exists; pick another name.",
                               name=body.name)
            changes.append(phrase("name {was} → {now}", was=node.name, now=body.name))
            node.name = body.name
        if body.rack is not None and (body.rack or None) != node.rack_id:
            rack = rack_named(s, body.rack, node.region).id if body.rack else None
            changes.append(phrase("rack {was} → {now}", was=node.rack_id or "-", now=rack or "-"))
            node.rack_id = rack
        if body.fabric is not None and (body.fabric or None) != node.fabric_id:
            if holds_tenant(s, node):
                raise Conflict("Node {node_name} holds a tenant's instance; its fabric changes "
                               "once released (drain it first).", node_name=node.name)
            fabric = fabric_named(s, body.fabric, node.region).id if body.fabric else None
            changes.append(phrase("fabric {was} → {now}", was=node.fabric_id or "-",
                                  now=fabric or "-"))
            node.fabric_id = fabric
        if body.bmc_password is not None:
            node.bmc_username = body.bmc_username or node.bmc_username
            node.bmc_password_enc = p.box.seal(body.bmc_password)
            node.last_error = None
            changes.append(phrase("BMC credentials (tried on the BMC)") if body.verify
                           else phrase("BMC credentials (not tried)"))
        if changes:
            node.updated_at = now
            record_event(s, now, Happened("node", node.id, "note", node.instance_id,
                                          to_value="updated", message=listed(changes)),
                         actor=by(actor))
    return get_node(p, actor, node_id if body.name is None else body.name)


def delete_node(p: Driven, actor: Principal, node_id: str, reason: str | None) -> NodeView:
    """Remove a node from the fleet. Its row, history, alerts and erase certificates stay
    (looked up by id); its name, BMC address, system UUID and serial are free to enroll
    again; its rack and fabric let go; its agent's credential ends."""
    actor.require_operator()
    with p.db.write() as s:
        node = load_node(s, node_id)
        if holds_tenant(s, node):
            raise Conflict("Node {node_name} holds a tenant's instance "
                           "({value}); drain it and delete "
                           "it once released.",
                           node_name=node.name, value=node.instance_id or 'container slices')
        if not NODE.allows(NodeStatus(node.status), "delete"):
            raise Conflict("Node {node_name} is {node_status}; it can be deleted once it is "
                           "available, in maintenance or retired.",
                           node_name=node.name, node_status=node.status)
        now = p.clock.now()
        was = f"{node.name} (rack {node.rack_id or '-'}, fabric {node.fabric_id or '-'})"
        node.name = f"{node.name[:60]}~deleted~{node.id}"
        node.bmc_key = node.system_uuid = node.rack_id = node.fabric_id = None
        node.drain_requested_at = None
        fence(node)
        revoke_credential(s, node.id, now)
        transition(s, p, node, NODE, "delete", Move(now, actor=by(actor),
                   reason=(reason or "deleted by operator") + f"; was {was}"))
        deleted_id = node.id
    return get_node(p, actor, deleted_id)


def replace_simulated_parts(p: Driven, name: str, driver: str, agent_kind: str) -> bool:
    """A simulated server's repair replaces its faulty parts: the faults injected into it
    are gone (its burn-in then passes, unless new ones are injected). Real hardware: no-op."""
    if not is_simulated(p, driver, agent_kind):
        return False
    fleet = p.drivers.fleet
    if driver == "simulated" and fleet is not None:
        fleet.set_gpu_faults(name, [])
    else:
        getattr(p.drivers.agents.get(driver), "gpu_faults", {}).pop(name, None)
    return True


def inject_faults(p: Driven, actor: Principal, node_id: str, faults: list[str]) -> list[str]:
    """The demo's fault injection: GPU faults (agent/gpu/simulated.py's KIND[:GPU[:ARG]]) a
    simulated server's stand-in agent reports from now on (its telemetry, its acceptance);
    an empty list clears them. Refused for real hardware."""
    actor.require_operator()
    try:
        parse_faults(faults)
    except ValueError as exc:
        raise InvalidInput("faults", str(exc)) from None
    with p.db.read() as s:
        node = load_node(s, node_id, lock=False)
        name, driver, agent_kind = node.name, node.bmc_driver, node.agent_kind
    if not is_simulated(p, driver, agent_kind):
        raise Conflict("Node {name} is real hardware; faults are injected only into "
                       "simulated servers.", name=name)
    fleet = p.drivers.fleet
    if driver == "simulated" and fleet is not None:
        fleet.set_gpu_faults(name, faults)
    else:  # a stand-in agent for a server behind a real BMC (the Redfish demo)
        agent = p.drivers.agents.get(driver)
        getattr(agent, "gpu_faults", {})[name] = list(faults)
    with p.db.write() as s:
        node = load_node(s, node_id)
        record_event(s, p.clock.now(), Happened(
            "node", node.id, "note", node.instance_id, to_value="faults",
            message=phrase("simulated faults: {faults}",
                           faults=", ".join(faults) or phrase("none"))), actor=by(actor))
    return list(faults)
