"""Saved environments: a tenant's container instance saved as an image in the platform's
registry, and containers started from one

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-01 23:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0042'
down_revision = '0041'
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = gpulease.db.tables.UtcDateTime(timezone=True)
    op.create_table(
        'saved_images',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('source_instance_id', sa.String(length=32), nullable=False),
        sa.Column('base_image_id', sa.String(length=100), nullable=False),
        sa.Column('reference', sa.String(length=300), nullable=False),
        sa.Column('digest', sa.String(length=100), nullable=True),
        sa.Column('size_bytes', sa.BigInteger(), nullable=True),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('created_at', when, nullable=False),
        sa.Column('created_by', sa.String(length=64), nullable=False),
        sa.Column('saved_at', when, nullable=True),
        sa.Column('claimed_until', when, nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_saved_images_tenant_id', 'saved_images', ['tenant_id'])
    op.create_index('ix_saved_images_status', 'saved_images', ['status'])
    with op.batch_alter_table('instances') as batch:
        batch.add_column(sa.Column('saved_image_id', sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances') as batch:
        batch.drop_column('saved_image_id')
    op.drop_table('saved_images')
