"""Card repairs in a window the tenant accepts, and burn-in before a repaired node returns

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0039'
down_revision = '0038'
branch_labels = None
depends_on = None


def _when(name: str) -> sa.Column[object]:
    return sa.Column(name, gpulease.db.tables.UtcDateTime(timezone=True), nullable=True)


def upgrade() -> None:
    with op.batch_alter_table('tickets') as batch:
        batch.add_column(_when('repair_window_start'))
        batch.add_column(_when('repair_window_end'))
        batch.add_column(_when('repair_window_accepted_at'))
        batch.add_column(_when('repair_window_begun_at'))
        batch.create_index('ix_tickets_repair_window_start', ['repair_window_start'])
    with op.batch_alter_table('repairs') as batch:
        batch.add_column(sa.Column('instance_id', sa.String(length=32), nullable=True))
        batch.add_column(_when('burned_in_at'))
        batch.add_column(sa.Column('burn_in_report_id', sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('repairs') as batch:
        batch.drop_column('burn_in_report_id')
        batch.drop_column('burned_in_at')
        batch.drop_column('instance_id')
    with op.batch_alter_table('tickets') as batch:
        batch.drop_index('ix_tickets_repair_window_start')
        batch.drop_column('repair_window_begun_at')
        batch.drop_column('repair_window_accepted_at')
        batch.drop_column('repair_window_end')
        batch.drop_column('repair_window_start')
