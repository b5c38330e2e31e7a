"""A node's unrepaired fault (`nodes.fault_ticket_id`): the ticket that reports a fault on
it, set when a fault's ticket opens and cleared by its repair or the ticket's resolution.
While set, the node cannot enter the pool; cleaned after its instance, it goes for repair.
Filled from the tickets open now (a tenant's own reports aside) and the repairs under way.

Revision ID: 0056
Revises: 0055
Create Date: 2026-12-05 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0056'
down_revision = '0055'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.add_column(sa.Column('fault_ticket_id', sa.String(32), nullable=True))
    op.execute(
        "UPDATE nodes SET fault_ticket_id = ("
        " SELECT t.id FROM tickets t WHERE t.node_id = nodes.id"
        " AND t.status <> 'resolved' AND t.kind <> 'tenant_report'"
        " AND NOT EXISTS (SELECT 1 FROM repairs r WHERE r.node_id = nodes.id"
        "   AND r.finished_at IS NOT NULL AND r.finished_at >= t.opened_at)"
        " ORDER BY t.opened_at DESC, t.id DESC LIMIT 1)")


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.drop_column('fault_ticket_id')
