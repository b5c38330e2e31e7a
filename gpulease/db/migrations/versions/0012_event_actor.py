"""who caused each event; notes on an instance's history told apart from its stages

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

NOTES = ('moved', 'renewed', 'grace', 'sla_credit', 'refund', 'unpaid')


def upgrade() -> None:
    with op.batch_alter_table('events') as batch_op:
        batch_op.add_column(sa.Column('actor', sa.String(length=64), nullable=True))
    events = sa.table('events', sa.column('kind', sa.String), sa.column('to_value', sa.String),
                      sa.column('resource', sa.String))
    op.execute(events.update().where(events.c.resource == 'instance', events.c.kind == 'stage',
                                     events.c.to_value.in_(NOTES)).values(kind='note'))


def downgrade() -> None:
    events = sa.table('events', sa.column('kind', sa.String), sa.column('to_value', sa.String),
                      sa.column('resource', sa.String))
    op.execute(events.update().where(events.c.resource == 'instance', events.c.kind == 'note')
               .values(kind='stage'))
    with op.batch_alter_table('events') as batch_op:
        batch_op.drop_column('actor')
