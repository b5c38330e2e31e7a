"""Power actions: a tenant's reboot or power cycle of its own servers and restart of its
container (`power_actions`), driven by the worker of the instance's site. None yet.

Revision ID: 0062
Revises: 0061
Create Date: 2026-12-05 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0062'
down_revision = '0061'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'power_actions',
        sa.Column('id', sa.String(32), nullable=False),
        sa.Column('tenant_id', sa.String(32), nullable=False),
        sa.Column('instance_id', sa.String(32), nullable=False),
        sa.Column('region', sa.String(64), nullable=False),
        sa.Column('kind', sa.String(16), nullable=False),
        sa.Column('node_name', sa.String(64), nullable=True),
        sa.Column('status', sa.String(16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('requested_by', sa.String(64), nullable=False),
        sa.Column('requested_at', gpulease.db.tables.UtcDateTime(timezone=True),
                  nullable=False),
        sa.Column('finished_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('sent_to', sa.Text(), nullable=False),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('lock_token', sa.String(32), nullable=True),
        sa.Column('lock_owner', sa.String(80), nullable=True),
        sa.Column('lock_expires_at', gpulease.db.tables.UtcDateTime(timezone=True),
                  nullable=True),
        sa.Column('next_attempt_at', gpulease.db.tables.UtcDateTime(timezone=True),
                  nullable=True),
        sa.Column('step_in_progress', sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    for column in ('tenant_id', 'instance_id', 'status', 'next_attempt_at'):
        op.create_index(f'ix_power_actions_{column}', 'power_actions', [column])


def downgrade() -> None:
    op.drop_table('power_actions')
