"""a shared server's Docker engine URL; console sign-in throttling

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 12:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nodes') as batch_op:
        batch_op.add_column(sa.Column('runtime_url', sa.String(length=300), nullable=True))
    with op.batch_alter_table('users') as batch_op:
        batch_op.add_column(sa.Column('failed_sign_ins', sa.Integer(), server_default='0',
                                      nullable=False))
        batch_op.add_column(sa.Column('sign_in_blocked_until',
                                      gpulease.db.tables.UtcDateTime(timezone=True),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users') as batch_op:
        batch_op.drop_column('sign_in_blocked_until')
        batch_op.drop_column('failed_sign_ins')
    with op.batch_alter_table('nodes') as batch_op:
        batch_op.drop_column('runtime_url')
