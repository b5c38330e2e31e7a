"""The worker registry: each worker's host, start, heartbeat and claims

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-01 13:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'worker_processes',
        sa.Column('owner', sa.String(length=80), nullable=False),
        sa.Column('host', sa.String(length=200), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=False),
        sa.Column('version', sa.String(length=32), nullable=False),
        sa.Column('threads', sa.Integer(), nullable=False),
        sa.Column('started_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('seen_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('claims', sa.BigInteger(), nullable=False),
        sa.Column('stopped_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('owner'))
    op.create_index(op.f('ix_worker_processes_seen_at'), 'worker_processes', ['seen_at'])


def downgrade() -> None:
    op.drop_index(op.f('ix_worker_processes_seen_at'), table_name='worker_processes')
    op.drop_table('worker_processes')
