"""BMCs push their alerts: each node's event subscription and the secret its events carry

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-01 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('nodes', sa.Column('bmc_subscription', sa.String(length=500), nullable=True))
    op.add_column('nodes', sa.Column('bmc_events_hash', sa.String(length=64), nullable=True))
    op.add_column('nodes', sa.Column('bmc_event_at',
                                     gpulease.db.tables.UtcDateTime(timezone=True),
                                     nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        for column in ('bmc_event_at', 'bmc_events_hash', 'bmc_subscription'):
            batch.drop_column(column)
