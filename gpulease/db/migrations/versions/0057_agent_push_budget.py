"""A node agent's telemetry budget: what it stored today (`node_agents.pushed_day`,
`pushed_bytes`) and how many pushes were refused for going past the daily budget
(`pushes_refused`). Existing agents start at nothing stored and nothing refused.

Revision ID: 0057
Revises: 0056
Create Date: 2026-12-05 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0057'
down_revision = '0056'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('node_agents') as batch:
        batch.add_column(sa.Column('pushed_day', sa.String(10), nullable=True))
        batch.add_column(sa.Column('pushed_bytes', sa.BigInteger(), nullable=False,
                                   server_default='0'))
        batch.add_column(sa.Column('pushes_refused', sa.Integer(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('node_agents') as batch:
        batch.drop_column('pushes_refused')
        batch.drop_column('pushed_bytes')
        batch.drop_column('pushed_day')
