"""Instances: root password login over SSH only when the order asked for it

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('instances', sa.Column('password_login', sa.Boolean(),
                                         server_default=sa.false(), nullable=False))


def downgrade() -> None:
    op.drop_column('instances', 'password_login')
