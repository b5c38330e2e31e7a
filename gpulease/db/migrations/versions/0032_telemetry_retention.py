"""Telemetry retention: per-minute summaries indexed by time, hourly summaries kept longer

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-01 16:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0032'
down_revision = '0031'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_telemetry_summaries_received_at', 'telemetry_summaries',
                    ['received_at'])
    op.create_table(
        'telemetry_hourly',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('node_id', sa.String(length=32), nullable=False),
        sa.Column('instance_id', sa.String(length=32), nullable=True),
        sa.Column('hour', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('gpu_index', sa.Integer(), nullable=False),
        sa.Column('gpu_uuid', sa.String(length=80), nullable=False),
        sa.Column('summary_json', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['node_id'], ['nodes.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_telemetry_hourly_hour', 'telemetry_hourly', ['hour'])
    op.create_index('ix_telemetry_hourly_instance_id', 'telemetry_hourly', ['instance_id'])
    op.create_index('ix_telemetry_hourly_node_hour', 'telemetry_hourly', ['node_id', 'hour'])


def downgrade() -> None:
    op.drop_table('telemetry_hourly')
    op.drop_index('ix_telemetry_summaries_received_at', 'telemetry_summaries')
