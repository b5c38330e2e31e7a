"""Backups and saved images are claimed as nodes and instances are: a lock token, its owner
and expiry (extended by the owner's heartbeat), when the row is next due and the step under
way; a saved image's `claimed_until` becomes its next attempt

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-03 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0050'
down_revision = '0049'
branch_labels = None
depends_on = None


def _lock_columns(batch: object) -> None:
    add = batch.add_column  # type: ignore[attr-defined]
    add(sa.Column('lock_token', sa.String(32), nullable=True))
    add(sa.Column('lock_owner', sa.String(80), nullable=True))
    add(sa.Column('lock_expires_at', gpulease.db.tables.UtcDateTime(timezone=True),
                  nullable=True))
    add(sa.Column('step_in_progress', sa.String(32), nullable=True))


def upgrade() -> None:
    with op.batch_alter_table('backups') as batch:
        _lock_columns(batch)
    with op.batch_alter_table('saved_images') as batch:
        _lock_columns(batch)
        batch.add_column(sa.Column('next_attempt_at',
                                   gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))
        batch.create_index('ix_saved_images_next_attempt_at', ['next_attempt_at'])
    op.execute("UPDATE saved_images SET next_attempt_at = claimed_until")
    with op.batch_alter_table('saved_images') as batch:
        batch.drop_column('claimed_until')


def downgrade() -> None:
    with op.batch_alter_table('saved_images') as batch:
        batch.add_column(sa.Column('claimed_until',
                                   gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))
    op.execute("UPDATE saved_images SET claimed_until = next_attempt_at")
    with op.batch_alter_table('saved_images') as batch:
        batch.drop_index('ix_saved_images_next_attempt_at')
        for column in ('step_in_progress', 'lock_expires_at', 'lock_owner', 'lock_token',
                       'next_attempt_at'):
            batch.drop_column(column)
    with op.batch_alter_table('backups') as batch:
        for column in ('step_in_progress', 'lock_expires_at', 'lock_owner', 'lock_token'):
            batch.drop_column(column)
