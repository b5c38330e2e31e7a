"""rate limits' shared counters; sign-in lockouts move to them (per account and address)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'rate_counters',
        sa.Column('key', sa.String(length=120), nullable=False),
        sa.Column('window_s', sa.Integer(), nullable=False),
        sa.Column('number', sa.BigInteger(), nullable=False),
        sa.Column('hits', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('key', 'window_s', 'number', name=op.f('pk_rate_counters')),
    )
    with op.batch_alter_table('users') as batch_op:
        batch_op.drop_column('sign_in_blocked_until')
        batch_op.drop_column('failed_sign_ins')


def downgrade() -> None:
    with op.batch_alter_table('users') as batch_op:
        batch_op.add_column(sa.Column('failed_sign_ins', sa.Integer(), server_default='0',
                                      nullable=False))
        batch_op.add_column(sa.Column('sign_in_blocked_until',
                                      gpulease.db.tables.UtcDateTime(timezone=True),
                                      nullable=True))
    op.drop_table('rate_counters')
