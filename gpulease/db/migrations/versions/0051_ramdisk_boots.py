"""Image-based deploys: each boot of the deploy ramdisk, its plan and its report; a
node's SSH endpoint behind NAT or a port forward

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-04 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0051'
down_revision = '0050'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'ramdisk_boots',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('node_id', sa.String(length=32), nullable=False),
        sa.Column('instance_id', sa.String(length=32), nullable=True),
        sa.Column('booted_in', sa.String(length=32), nullable=False),
        sa.Column('action', sa.String(length=16), nullable=False),
        sa.Column('plan', sa.Text(), nullable=False),
        sa.Column('iso_path', sa.String(length=500), nullable=False),
        sa.Column('disks', sa.String(length=500), nullable=True),
        sa.Column('report_json', sa.Text(), nullable=True),
        sa.Column('created_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('reported_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['instance_id'], ['instances.id'],
                                name=op.f('fk_ramdisk_boots_instance_id_instances')),
        sa.ForeignKeyConstraint(['node_id'], ['nodes.id'],
                                name=op.f('fk_ramdisk_boots_node_id_nodes')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_ramdisk_boots')))
    op.create_index(op.f('ix_ramdisk_boots_node_id'), 'ramdisk_boots', ['node_id'],
                    unique=False)
    with op.batch_alter_table('nodes') as batch:
        batch.add_column(sa.Column('ssh_endpoint', sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.drop_column('ssh_endpoint')
    op.drop_index(op.f('ix_ramdisk_boots_node_id'), table_name='ramdisk_boots')
    op.drop_table('ramdisk_boots')
