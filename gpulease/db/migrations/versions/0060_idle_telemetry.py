"""Idle GPUs: each stored telemetry window keeps its mean utilisation and length as columns
(`telemetry_summaries.util_avg_pct`, `window_s`), so an instance's idle share over the last
hour or day is one grouped query; `idle_notices` records when a tenant was last told an
instance sat idle. Windows stored before carry neither column and are not counted.

Revision ID: 0060
Revises: 0059
Create Date: 2026-12-05 09:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0060'
down_revision = '0059'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('telemetry_summaries') as batch:
        batch.add_column(sa.Column('util_avg_pct', sa.Float(), nullable=True))
        batch.add_column(sa.Column('window_s', sa.Float(), nullable=True))
    op.create_table(
        'idle_notices',
        sa.Column('instance_id', sa.String(32), primary_key=True),
        sa.Column('noticed_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('idle_pct', sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('idle_notices')
    with op.batch_alter_table('telemetry_summaries') as batch:
        batch.drop_column('window_s')
        batch.drop_column('util_avg_pct')
