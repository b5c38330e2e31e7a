"""password resets by e-mail: signed single-use links

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'password_resets',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('user_id', sa.String(length=32), nullable=False),
        sa.Column('created_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('expires_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('requested_from', sa.String(length=64), nullable=True),
        sa.Column('mailed_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('last_error', sa.String(length=1000), nullable=True),
        sa.Column('used_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'],
                                name=op.f('fk_password_resets_user_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_password_resets')),
    )
    op.create_index(op.f('ix_password_resets_user_id'), 'password_resets', ['user_id'],
                    unique=False)
    op.create_index(op.f('ix_password_resets_mailed_at'), 'password_resets', ['mailed_at'],
                    unique=False)


def downgrade() -> None:
    op.drop_table('password_resets')
