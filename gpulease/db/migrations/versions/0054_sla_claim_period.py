"""An SLA claim belongs to the lease period its evidence falls in (`period_start`), so that
period's credit cap holds whenever the claim is confirmed; an outage claim keeps what was
out and when (`node_id`, `gpu_index` (-1: the whole server), `outage_from`, `outage_to`),
so overlapping claims for one outage are merged. Older claims keep nulls: their cap is
counted as before, by the confirmation's date

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-05 00:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0054'
down_revision = '0053'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sla_claims') as batch:
        batch.add_column(sa.Column('period_start',
                                   gpulease.db.tables.UtcDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('node_id', sa.String(length=32), nullable=True))
        batch.add_column(sa.Column('gpu_index', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('outage_from',
                                   gpulease.db.tables.UtcDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('outage_to',
                                   gpulease.db.tables.UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sla_claims') as batch:
        for column in ('outage_to', 'outage_from', 'gpu_index', 'node_id', 'period_start'):
            batch.drop_column(column)
