"""How long a delivery waited on its tenant (`instances.tenant_wait_s`): the acceptance run
of a server whose tenant already held its keys, left unanswered by the server's agent.
Late-delivery credits count the platform's own time only

Revision ID: 0055
Revises: 0054
Create Date: 2026-12-05 00:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0055'
down_revision = '0054'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances') as batch:
        batch.add_column(sa.Column('tenant_wait_s', sa.Float(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('instances') as batch:
        batch.drop_column('tenant_wait_s')
