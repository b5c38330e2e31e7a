"""A node agent's credentials: the one-time enrollment token (on the config drive, or minted
by an operator), traded once for the agent's own credential; the check of that credential
on every call; and its end (a lifecycle effect on deploy, hand-back, free and failure, and
a node's deletion), which also ends the node's unused enrollment tokens."""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gpulease.db.tables import AgentEnrollment, Node, NodeAgent
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Forbidden, NotFound, Unauthorized
from gpulease.ports.records import Records
from gpulease.security import hash_token

ENROLL_PREFIX = "glat_"  # one-time, from the config drive or an operator
CREDENTIAL_PREFIX = "glan_"  # the agent's own credential afterwards
ENROLL_TTL = timedelta(hours=24)


def mint_enrollment(s: Session, node_id: str, instance_id: str | None, now: datetime,
                    token: str | None = None) -> str:
    token = token or ENROLL_PREFIX + secrets.token_urlsafe(32)
    s.add(AgentEnrollment(token_hash=hash_token(token), node_id=node_id,
                          instance_id=instance_id, created_at=now,
                          expires_at=now + ENROLL_TTL))
    return token


def operator_enrollment(p: Records, actor: Principal, node_id: str) -> str:
    """A fresh one-time token for a node's agent (after a reinstall, or a manual setup)."""
    if not actor.is_operator:
        raise Forbidden("Only an operator can mint agent enrollment tokens.")
    with p.db.write() as s:
        node = s.get(Node, node_id) or s.scalar(select(Node).where(Node.name == node_id))
        if node is None:
            raise NotFound("No node {node_id}; `gpulease nodes` lists them.", node_id=node_id)
        return mint_enrollment(s, node.id, node.instance_id, p.clock.now())


def register(p: Records, token: str, hostname: str, address: str | None,
             inventory: dict[str, Any] | None) -> tuple[str, str]:
    """Trade a one-time enrollment token for a node credential: (node id, credential)."""
    if not token.startswith(ENROLL_PREFIX):
        raise Unauthorized("That is not an agent enrollment token (they start with "
                           "{enroll_prefix!r}); it is on the config drive, or an operator "
                           "mints one with `gpulease node agent-token NODE`.",
                           enroll_prefix=ENROLL_PREFIX)
    now = p.clock.now()
    credential = CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    with p.db.write() as s:
        enrollment = s.get(AgentEnrollment, hash_token(token), with_for_update=True)
        if enrollment is None or enrollment.used_at is not None or enrollment.expires_at < now:
            raise Unauthorized("This enrollment token is unknown, used or expired; ask the "
                               "operator for a new one (`gpulease node agent-token NODE`).")
        enrollment.used_at = now
        agent = s.get(NodeAgent, enrollment.node_id)
        simulated = bool((inventory or {}).get("simulated_gpus", False))
        if agent is None:
            agent = NodeAgent(node_id=enrollment.node_id, registered_at=now)
            s.add(agent)
        agent.credential_hash = hash_token(credential)  # a re-enrollment revokes the old one
        agent.hostname, agent.address, agent.simulated = hostname, address, simulated
        agent.registered_at = agent.last_seen_at = now
        agent.inventory_json = json.dumps(inventory) if inventory is not None else None
        return enrollment.node_id, credential


def authenticate_agent(s: Session, credential: str | None) -> NodeAgent:
    if not credential or not credential.startswith(CREDENTIAL_PREFIX):
        raise Unauthorized("Send the agent credential: 'Authorization: Bearer "
                           "{credential_prefix}...'.", credential_prefix=CREDENTIAL_PREFIX)
    agent = s.scalar(select(NodeAgent).where(
        NodeAgent.credential_hash == hash_token(credential)))
    if agent is None:
        raise Unauthorized("Unknown or replaced agent credential; enroll the agent again.")
    return agent


REVOKED = "revoked:"  # a credential_hash no hash of a credential can equal


def revoke_credential(s: Session, node_id: str, now: datetime) -> None:
    """The node's agent credential ends (its record stays, for the operator). Unused
    one-time enrollment tokens of the node die with it: a new agent needs a new token."""
    s.execute(update(NodeAgent).where(NodeAgent.node_id == node_id,
                                      ~NodeAgent.credential_hash.startswith(REVOKED))
              .values(credential_hash=REVOKED + node_id)
              .execution_options(synchronize_session=False))
    s.execute(delete(AgentEnrollment).where(AgentEnrollment.node_id == node_id,
                                            AgentEnrollment.used_at.is_(None),
                                            AgentEnrollment.created_at < now)
              .execution_options(synchronize_session=False))
