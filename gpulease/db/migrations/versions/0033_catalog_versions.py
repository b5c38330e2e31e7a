"""Catalog versions: the catalog every process prices from, published through the database

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-01 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0033'
down_revision = '0032'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'catalog_versions',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('source', sa.String(length=500), nullable=False),
        sa.Column('published_at', gpulease.db.tables.UtcDateTime(timezone=True),
                  nullable=False),
        sa.Column('published_by', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )


def downgrade() -> None:
    op.drop_table('catalog_versions')
