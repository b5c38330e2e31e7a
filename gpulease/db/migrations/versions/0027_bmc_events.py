"""BMC logs as evidence: alerts know their source; nodes keep what their BMC log showed

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('hardware_alerts', sa.Column('source', sa.String(length=16),
                                               server_default='agent', nullable=False))
    op.add_column('nodes', sa.Column('bmc_log_seen', sa.Text(), nullable=True))
    op.add_column('nodes', sa.Column('bmc_health', sa.String(length=16), nullable=True))
    op.add_column('nodes', sa.Column('bmc_checked_at',
                                     gpulease.db.tables.UtcDateTime(timezone=True),
                                     nullable=True))
    op.create_index(op.f('ix_nodes_bmc_checked_at'), 'nodes', ['bmc_checked_at'],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_nodes_bmc_checked_at'), table_name='nodes')
    with op.batch_alter_table('nodes') as batch:
        for column in ('bmc_checked_at', 'bmc_health', 'bmc_log_seen'):
            batch.drop_column(column)
    with op.batch_alter_table('hardware_alerts') as batch:
        batch.drop_column('source')
