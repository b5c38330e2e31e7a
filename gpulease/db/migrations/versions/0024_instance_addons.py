"""Add-ons on leased instances, charged per period with the lease

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'instance_addons',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('instance_id', sa.String(length=32), nullable=False),
        sa.Column('addon_id', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('unit', sa.String(length=16), nullable=False),
        sa.Column('quantity', sa.Numeric(precision=15, scale=3), nullable=False),
        sa.Column('unit_price', sa.Numeric(precision=14, scale=4), nullable=False),
        sa.Column('since', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('until', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column('created_by', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['instance_id'], ['instances.id'],
                                name=op.f('fk_instance_addons_instance_id_instances')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_instance_addons')),
    )
    op.create_index(op.f('ix_instance_addons_instance_id'), 'instance_addons', ['instance_id'],
                    unique=False)


def downgrade() -> None:
    op.drop_table('instance_addons')
