"""Spending bounded by the wallet: overdraft and suspension on wallets, dunning on invoices,
money notices in the outbox

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-01 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('wallets') as batch:
        for column in ('overdrawn_since', 'suspended_at', 'low_balance_notice_at'):
            batch.add_column(sa.Column(column, gpulease.db.tables.UtcDateTime(timezone=True),
                                       nullable=True))
        batch.add_column(sa.Column('suspended_reason', sa.String(length=500), nullable=True))
    with op.batch_alter_table('invoices') as batch:
        batch.add_column(sa.Column('dunning_sent', sa.String(length=60), nullable=True))
    with op.batch_alter_table('lease_notices') as batch:
        batch.alter_column('lease_id', existing_type=sa.String(length=16), nullable=True)
        batch.alter_column('instance_id', existing_type=sa.String(length=32), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM lease_notices WHERE lease_id IS NULL")
    with op.batch_alter_table('lease_notices') as batch:
        batch.alter_column('instance_id', existing_type=sa.String(length=32), nullable=False)
        batch.alter_column('lease_id', existing_type=sa.String(length=16), nullable=False)
    with op.batch_alter_table('invoices') as batch:
        batch.drop_column('dunning_sent')
    with op.batch_alter_table('wallets') as batch:
        for column in ('suspended_reason', 'low_balance_notice_at', 'suspended_at',
                       'overdrawn_since'):
            batch.drop_column(column)
