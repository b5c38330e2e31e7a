"""History lines and ticket timeline lines the platform writes keep their phrase, to be
shown in each reader's language

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-02 07:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0048'
down_revision = '0047'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('events', 'ticket_entries'):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('phrase', sa.Text(), nullable=True))


def downgrade() -> None:
    for table in ('events', 'ticket_entries'):
        with op.batch_alter_table(table) as batch:
            batch.drop_column('phrase')
