"""Tenants have a lifecycle: active, suspended by an operator, closed

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-01 15:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0031'
down_revision = '0030'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants') as batch:
        batch.add_column(sa.Column('status', sa.String(length=16), nullable=False,
                                   server_default='active'))
        batch.add_column(sa.Column('status_reason', sa.String(length=500), nullable=True))
        batch.add_column(sa.Column('updated_at',
                                   gpulease.db.tables.UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tenants') as batch:
        batch.drop_column('updated_at')
        batch.drop_column('status_reason')
        batch.drop_column('status')
