"""Ending a node agent's credential: a lifecycle effect (deploy, hand-back, free, failure)
and a node's deletion. On its own so the lifecycle writer needs nothing else of the agent
services."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from gpulease.db.tables import AgentEnrollment, NodeAgent

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
