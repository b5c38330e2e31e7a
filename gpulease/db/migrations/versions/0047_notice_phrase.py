"""A notice keeps its text as a phrase (template and values), to be mailed in each reader's
language

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-02 07:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0047'
down_revision = '0046'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('lease_notices') as batch:
        batch.add_column(sa.Column('phrase', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('lease_notices') as batch:
        batch.drop_column('phrase')
