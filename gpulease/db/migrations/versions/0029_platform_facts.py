"""Facts about the installation: the secret key's fingerprint, so a process with another
key refuses to start

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('platform_facts',
                    sa.Column('name', sa.String(length=64), nullable=False),
                    sa.Column('value', sa.Text(), nullable=False),
                    sa.PrimaryKeyConstraint('name'))


def downgrade() -> None:
    op.drop_table('platform_facts')
