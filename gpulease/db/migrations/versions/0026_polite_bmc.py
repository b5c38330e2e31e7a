"""Polite BMCs: power requests counted per stage; a failed stage leaves the server safe

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('instances', 'nodes'):
        op.add_column(table, sa.Column('stage_requests', sa.Integer(), server_default='0',
                                       nullable=False))
    op.add_column('nodes', sa.Column('safe_off_due', sa.Boolean(), server_default='0',
                                     nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.drop_column('safe_off_due')
        batch.drop_column('stage_requests')
    with op.batch_alter_table('instances') as batch:
        batch.drop_column('stage_requests')
