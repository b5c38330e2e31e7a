"""What the agents family does when a node moves: whenever a node changes hands (deployed
for a tenant, handed back, erased, failed), any node agent credential from before ends; and
when its tenant releases an instance, its nodes' credentials end in the release's own
transaction, so none is accepted once the release has answered."""

from __future__ import annotations

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.domain.states import INSTANCE, NODE
from gpulease.lifecycle.effects import Change, Effect
from gpulease.ports.records import Moves
from gpulease.services.agents.credentials import revoke_credential


def _revoke_agent(c: Change[Moves]) -> None:
    revoke_credential(c.s, c.row.id, c.now)


def _revoke_instance_agents(c: Change[Moves]) -> None:
    for node_id in c.s.scalars(select(Node.id).where(Node.instance_id == c.row.id)):
        revoke_credential(c.s, node_id, c.now)


EFFECTS: tuple[Effect[Moves], ...] = (
    Effect(INSTANCE, "release", _revoke_instance_agents,
           "released: its nodes' agent credentials end at once, before the worker cleans "
           "them (the cleaning ramdisk enrolls afresh)"),
    Effect(NODE, "deploy", _revoke_agent,
           "a new tenant's machine: any node agent credential from before ends (the deploy's "
           "agent enrolls with the one-time token on its config drive)"),
    Effect(NODE, "clean", _revoke_agent,
           "handed back: the tenant's agent credential ends (the cleaning ramdisk enrolls "
           "afresh)"),
    Effect(NODE, "free", _revoke_agent, "erased: the cleaning ramdisk's credential ends"),
    Effect(NODE, "fail", _revoke_agent,
           "to maintenance: no agent credential stays (an operator mints a new token)"),
)
