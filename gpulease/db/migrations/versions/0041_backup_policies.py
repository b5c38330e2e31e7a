"""Backup policies (directory, schedule, backups when a lease lapses); a lease-end run's
retry deadline; a snapshot restored at delivery; object storage quotas and metering

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-01 23:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0041'
down_revision = '0040'
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = gpulease.db.tables.UtcDateTime(timezone=True)
    op.create_table(
        'backup_policies',
        sa.Column('instance_id', sa.String(length=32), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('path', sa.String(length=1024), nullable=False),
        sa.Column('every_hours', sa.Float(), nullable=True),
        sa.Column('at_lease_end', sa.Boolean(), nullable=False),
        sa.Column('max_mbps', sa.Float(), nullable=True),
        sa.Column('updated_at', when, nullable=False),
        sa.Column('updated_by', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('instance_id'),
    )
    op.create_index('ix_backup_policies_tenant_id', 'backup_policies', ['tenant_id'])
    with op.batch_alter_table('backups') as batch:
        batch.add_column(sa.Column('retry_until', when, nullable=True))
        batch.add_column(sa.Column('source_instance_id', sa.String(length=32), nullable=True))
    with op.batch_alter_table('instances') as batch:
        batch.add_column(sa.Column('restore_from', sa.String(length=100), nullable=True))
    with op.batch_alter_table('storage_accounts') as batch:
        batch.add_column(sa.Column('quota_gb', sa.Float(), nullable=True))
        batch.add_column(sa.Column('used_bytes', sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column('measured_at', when, nullable=True))
        batch.add_column(sa.Column('metered_through', sa.String(length=10), nullable=True))
        batch.add_column(sa.Column('quota_warned', sa.Integer(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('storage_accounts') as batch:
        for column in ('quota_warned', 'metered_through', 'measured_at', 'used_bytes',
                       'quota_gb'):
            batch.drop_column(column)
    with op.batch_alter_table('instances') as batch:
        batch.drop_column('restore_from')
    with op.batch_alter_table('backups') as batch:
        batch.drop_column('source_instance_id')
        batch.drop_column('retry_until')
    op.drop_table('backup_policies')
