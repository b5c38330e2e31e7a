"""A node that may hold a tenant's data with no certified erase since is marked
(`erase_due_since`) and cannot become available until erased. Marked now: nodes bound to an
instance, and nodes out of the pool whose last allocation is newer than their last passing
erase certificate

Revision ID: 0052
Revises: 0051
Create Date: 2026-12-04 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0052'
down_revision = '0051'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.add_column(sa.Column('erase_due_since',
                                   gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))
    op.execute("""
        UPDATE nodes SET erase_due_since = (
            SELECT MAX(a.created_at) FROM gpu_allocations a WHERE a.node_id = nodes.id)
        WHERE pool = 'bare_metal' AND (
            instance_id IS NOT NULL
            OR (status IN ('maintenance', 'failed', 'repair')
                AND EXISTS (SELECT 1 FROM gpu_allocations a WHERE a.node_id = nodes.id)
                AND NOT EXISTS (
                    SELECT 1 FROM erase_certificates c
                    WHERE c.node_id = nodes.id AND c.passed
                      AND c.created_at >= (SELECT MAX(a.created_at) FROM gpu_allocations a
                                           WHERE a.node_id = nodes.id))))
    """)


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.drop_column('erase_due_since')
