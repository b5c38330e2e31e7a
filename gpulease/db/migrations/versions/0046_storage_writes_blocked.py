"""A bucket past its quota refuses its tenant's writes at the store: when that began

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-02 05:25:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0046'
down_revision = '0045'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('storage_accounts') as batch:
        batch.add_column(sa.Column('writes_blocked_at',
                                   gpulease.db.tables.UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('storage_accounts') as batch:
        batch.drop_column('writes_blocked_at')
