"""Usage records beyond what an instance could physically use are held for review

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('usage_records') as batch:
        batch.add_column(sa.Column('status', sa.String(length=16), server_default='charged',
                                   nullable=False))
        batch.add_column(sa.Column('held_reason', sa.String(length=500), nullable=True))
        batch.add_column(sa.Column('decided_at', gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))
        batch.add_column(sa.Column('decided_by', sa.String(length=64), nullable=True))
    op.create_index(op.f('ix_usage_records_status'), 'usage_records', ['status'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_usage_records_status'), table_name='usage_records')
    with op.batch_alter_table('usage_records') as batch:
        for column in ('decided_by', 'decided_at', 'held_reason', 'status'):
            batch.drop_column(column)
