"""Billing profiles, invoice buyer and payment status, service spans on ledger entries

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'billing_profiles',
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('title', sa.String(length=200), nullable=False),
        sa.Column('tax_id', sa.String(length=20), nullable=False),
        sa.Column('address', sa.String(length=200), nullable=False),
        sa.Column('phone', sa.String(length=40), nullable=False),
        sa.Column('bank', sa.String(length=100), nullable=False),
        sa.Column('bank_account', sa.String(length=40), nullable=False),
        sa.Column('invoice_type', sa.String(length=8), nullable=False),
        sa.Column('email', sa.String(length=254), nullable=False),
        sa.Column('updated_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('updated_by', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'],
                                name=op.f('fk_billing_profiles_tenant_id_tenants')),
        sa.PrimaryKeyConstraint('tenant_id', name=op.f('pk_billing_profiles')),
    )
    with op.batch_alter_table('invoices') as batch:
        batch.add_column(sa.Column('buyer', sa.Text(), nullable=True))
        batch.add_column(sa.Column('payment_status', sa.String(length=8), nullable=True))
        batch.add_column(sa.Column('amount_due', sa.Numeric(precision=14, scale=2),
                                   nullable=True))
        batch.add_column(sa.Column('paid_at', gpulease.db.tables.UtcDateTime(timezone=True),
                                   nullable=True))
    op.create_index(op.f('ix_invoices_payment_status'), 'invoices', ['payment_status'],
                    unique=False)
    # Invoices finalized before: prepaid from the wallet, so paid.
    op.execute("UPDATE invoices SET payment_status = 'paid', amount_due = 0, "
               "paid_at = finalized_at WHERE status = 'final'")
    with op.batch_alter_table('ledger_entries') as batch:
        for column in ('service_from', 'service_until'):
            batch.add_column(sa.Column(column, gpulease.db.tables.UtcDateTime(timezone=True),
                                       nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ledger_entries') as batch:
        batch.drop_column('service_until')
        batch.drop_column('service_from')
    op.drop_index(op.f('ix_invoices_payment_status'), table_name='invoices')
    with op.batch_alter_table('invoices') as batch:
        for column in ('paid_at', 'amount_due', 'payment_status', 'buyer'):
            batch.drop_column(column)
    op.drop_table('billing_profiles')
