"""Backups of rented servers' data disks to their tenants' buckets, and restores; a long
agent command's progress

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0040'
down_revision = '0039'
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = gpulease.db.tables.UtcDateTime(timezone=True)
    op.create_table(
        'backups',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('instance_id', sa.String(length=32), nullable=False),
        sa.Column('node_id', sa.String(length=32), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('trigger', sa.String(length=16), nullable=False),
        sa.Column('path', sa.String(length=1024), nullable=False),
        sa.Column('max_mbps', sa.Float(), nullable=True),
        sa.Column('payload_enc', sa.Text(), nullable=True),
        sa.Column('snapshot_id', sa.String(length=64), nullable=True),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('files', sa.Integer(), nullable=True),
        sa.Column('bytes_total', sa.BigInteger(), nullable=True),
        sa.Column('bytes_moved', sa.BigInteger(), nullable=True),
        sa.Column('seconds', sa.Float(), nullable=True),
        sa.Column('key_id', sa.String(length=128), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', when, nullable=True),
        sa.Column('requested_by', sa.String(length=64), nullable=False),
        sa.Column('requested_at', when, nullable=False),
        sa.Column('started_at', when, nullable=True),
        sa.Column('finished_at', when, nullable=True),
        sa.ForeignKeyConstraint(['node_id'], ['nodes.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_backups_tenant_id', 'backups', ['tenant_id'])
    op.create_index('ix_backups_instance_id', 'backups', ['instance_id'])
    op.create_index('ix_backups_status', 'backups', ['status'])
    op.create_index('ix_backups_next_attempt_at', 'backups', ['next_attempt_at'])
    with op.batch_alter_table('agent_commands') as batch:
        batch.add_column(sa.Column('progress_moved', sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column('progress_total', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('agent_commands') as batch:
        batch.drop_column('progress_total')
        batch.drop_column('progress_moved')
    op.drop_table('backups')
