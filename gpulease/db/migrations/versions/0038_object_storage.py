"""Object storage: a bucket per tenant and its access keys

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-01 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0038'
down_revision = '0037'
branch_labels = None
depends_on = None

WHEN = gpulease.db.tables.UtcDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'storage_accounts',
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('bucket', sa.String(length=63), nullable=False),
        sa.Column('store_user', sa.String(length=64), nullable=False),
        sa.Column('created_at', WHEN, nullable=False),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id']),
        sa.PrimaryKeyConstraint('tenant_id'),
        sa.UniqueConstraint('bucket'),
    )
    op.create_table(
        'storage_keys',
        sa.Column('access_key_id', sa.String(length=128), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('created_at', WHEN, nullable=False),
        sa.Column('created_by', sa.String(length=64), nullable=False),
        sa.Column('revoked_at', WHEN, nullable=True),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id']),
        sa.PrimaryKeyConstraint('access_key_id'),
    )
    op.create_index('ix_storage_keys_tenant_id', 'storage_keys', ['tenant_id'])


def downgrade() -> None:
    op.drop_table('storage_keys')
    op.drop_table('storage_accounts')
