"""The deploy circuit breaker

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0034'
down_revision = '0033'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'circuit_breakers',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('opened_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column('updated_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )


def downgrade() -> None:
    op.drop_table('circuit_breakers')
