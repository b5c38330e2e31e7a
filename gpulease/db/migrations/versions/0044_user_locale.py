"""A user's language for the console and the mail sent to them (zh_CN or en; none: the
browser's)

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-02 04:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0044'
down_revision = '0043'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('locale', sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.drop_column('locale')
