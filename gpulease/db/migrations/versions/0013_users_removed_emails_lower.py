"""users can be removed; e-mail addresses are one account whatever their case

Existing addresses are lower-cased where that makes no duplicate; an address whose
lower-cased form another user has already stays as it is (an operator resolves it).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30 23:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch_op:
        batch_op.add_column(sa.Column('removed_at', gpulease.db.tables.UtcDateTime(timezone=True),
                                      nullable=True))
    users = sa.table('users', sa.column('id', sa.String), sa.column('email', sa.String))
    conn = op.get_bind()
    rows = conn.execute(sa.select(users.c.id, users.c.email)).all()
    taken = {email for _, email in rows}
    for user_id, email in rows:
        lower = email.lower()
        if lower != email and lower not in taken:
            conn.execute(users.update().where(users.c.id == user_id).values(email=lower))
            taken.discard(email)
            taken.add(lower)


def downgrade() -> None:
    with op.batch_alter_table('users') as batch_op:
        batch_op.drop_column('removed_at')
