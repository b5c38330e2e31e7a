"""A bare-metal data disk left unformatted for LUKS2 under the tenant's own key; backups
to a tenant's own S3

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-02 00:25:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0043'
down_revision = '0042'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances') as batch:
        batch.add_column(sa.Column('encrypted_data', sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    with op.batch_alter_table('backups') as batch:
        batch.add_column(sa.Column('target', sa.String(length=600), nullable=True))
        batch.add_column(sa.Column('target_enc', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('backups') as batch:
        batch.drop_column('target_enc')
        batch.drop_column('target')
    with op.batch_alter_table('instances') as batch:
        batch.drop_column('encrypted_data')
