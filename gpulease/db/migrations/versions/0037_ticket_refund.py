"""A ticket whose fault found no spare lets its tenant release with the unused time back

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-01 18:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0037'
down_revision = '0036'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tickets') as batch:
        batch.add_column(sa.Column('refund_unused_at',
                                   gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tickets') as batch:
        batch.drop_column('refund_unused_at')
