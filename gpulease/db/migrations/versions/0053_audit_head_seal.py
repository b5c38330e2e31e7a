"""The audit chain's head is sealed (an HMAC of its last row and where pruning cut, under
the audit key), so removing rows at either end and moving the head shows. Empty here: the
first process of this release to start seals it (services/platform/audit.py)

Revision ID: 0053
Revises: 0052
Create Date: 2026-12-04 23:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0053'
down_revision = '0052'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('audit_head') as batch:
        batch.add_column(sa.Column('seal', sa.String(length=64), nullable=False,
                                   server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('audit_head') as batch:
        batch.drop_column('seal')
