"""Budgets: a tenant's monthly spending budget (`budgets`, set by its admin) and the levels
(50, 80, 100 %) it was told it reached in a month (`budget_notices`). No tenant has one.

Revision ID: 0061
Revises: 0060
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0061'
down_revision = '0060'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'budgets',
        sa.Column('tenant_id', sa.String(32), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('monthly', sa.Numeric(14, 2), nullable=False),
        sa.Column('set_by', sa.String(200), nullable=False),
        sa.Column('set_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
    )
    op.create_table(
        'budget_notices',
        sa.Column('tenant_id', sa.String(32), sa.ForeignKey('tenants.id'), primary_key=True),
        sa.Column('period', sa.String(7), primary_key=True),
        sa.Column('level', sa.Integer(), primary_key=True),
        sa.Column('sent_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('budget_notices')
    op.drop_table('budgets')
