"""a shared server's Docker engine URL

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 12:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nodes') as batch_op:
        batch_op.add_column(sa.Column('runtime_url', sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch_op:
        batch_op.drop_column('runtime_url')
