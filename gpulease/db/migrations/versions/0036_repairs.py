"""Repairs: a node's repair with its parts, serials and time to repair

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-01 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0036'
down_revision = '0035'
branch_labels = None
depends_on = None

WHEN = gpulease.db.tables.UtcDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'repairs',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('node_id', sa.String(length=32), nullable=False),
        sa.Column('offer', sa.String(length=200), nullable=False),
        sa.Column('ticket_id', sa.String(length=32), nullable=True),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('parts', sa.Text(), nullable=True),
        sa.Column('started_at', WHEN, nullable=False),
        sa.Column('started_by', sa.String(length=64), nullable=False),
        sa.Column('finished_at', WHEN, nullable=True),
        sa.Column('finished_by', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['node_id'], ['nodes.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_repairs_node_id', 'repairs', ['node_id'])
    op.create_index('ix_repairs_ticket_id', 'repairs', ['ticket_id'])
    op.create_index('ix_repairs_finished_at', 'repairs', ['finished_at'])


def downgrade() -> None:
    op.drop_table('repairs')
