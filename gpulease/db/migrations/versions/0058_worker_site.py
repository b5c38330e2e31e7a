"""A worker's site (`worker_processes.site`): the data centre whose servers it serves
(`gpulease worker --site`); NULL for a worker that serves every site without one of its
own. Workers registered before serve every site, as they did.

Revision ID: 0058
Revises: 0057
Create Date: 2026-12-05 09:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0058'
down_revision = '0057'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('worker_processes') as batch:
        batch.add_column(sa.Column('site', sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('worker_processes') as batch:
        batch.drop_column('site')
