"""Ledger entries the platform writes keep their reference and item as phrases (and invoice
lines their description), SLA claims their text and hardware alerts their message, to be shown in each reader's language (the columns
themselves keep the English text)

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-02 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0049'
down_revision = '0048'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ledger_entries') as batch:
        batch.add_column(sa.Column('phrase', sa.Text(), nullable=True))
        batch.add_column(sa.Column('item_phrase', sa.Text(), nullable=True))
    with op.batch_alter_table('invoice_lines') as batch:
        batch.add_column(sa.Column('description_phrase', sa.Text(), nullable=True))
    with op.batch_alter_table('sla_claims') as batch:
        batch.add_column(sa.Column('text_phrase', sa.Text(), nullable=True))
        batch.add_column(sa.Column('item_phrase', sa.Text(), nullable=True))
    with op.batch_alter_table('hardware_alerts') as batch:
        batch.add_column(sa.Column('phrase', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('invoice_lines') as batch:
        batch.drop_column('description_phrase')
    with op.batch_alter_table('hardware_alerts') as batch:
        batch.drop_column('phrase')
    with op.batch_alter_table('sla_claims') as batch:
        batch.drop_column('item_phrase')
        batch.drop_column('text_phrase')
    with op.batch_alter_table('ledger_entries') as batch:
        batch.drop_column('item_phrase')
        batch.drop_column('phrase')
