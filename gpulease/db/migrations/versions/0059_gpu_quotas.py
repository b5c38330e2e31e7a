"""GPU quotas: an operator's cap on the GPUs a tenant holds at once, in all or of one offer
(`gpu_quotas`). Existing tenants have none.

Revision ID: 0059
Revises: 0058
Create Date: 2026-12-05 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0059'
down_revision = '0058'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'gpu_quotas',
        sa.Column('tenant_id', sa.String(32), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('offer', sa.String(140), primary_key=True),
        sa.Column('max_gpus', sa.Integer(), nullable=False),
        sa.Column('reason', sa.String(500), nullable=True),
        sa.Column('set_by', sa.String(200), nullable=False),
        sa.Column('set_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('gpu_quotas')
