"""SLA claims: credits wait for evidence the tenant does not control

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sla_claims',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('instance_id', sa.String(length=32), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('evidence', sa.String(length=200), nullable=False),
        sa.Column('item', sa.String(length=200), nullable=False),
        sa.Column('text', sa.String(length=500), nullable=False),
        sa.Column('amount', sa.Numeric(precision=14, scale=2), nullable=False),
        sa.Column('created_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('decision', sa.String(length=16), nullable=True),
        sa.Column('decided_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column('decided_by', sa.String(length=64), nullable=True),
        sa.Column('note', sa.String(length=500), nullable=True),
        sa.Column('credited', sa.Numeric(precision=14, scale=2), nullable=True),
        sa.ForeignKeyConstraint(['instance_id'], ['instances.id'],
                                name=op.f('fk_sla_claims_instance_id_instances')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_sla_claims')),
        sa.UniqueConstraint('item', name=op.f('uq_sla_claims_item')),
    )
    op.create_index(op.f('ix_sla_claims_instance_id'), 'sla_claims', ['instance_id'],
                    unique=False)
    op.create_index(op.f('ix_sla_claims_tenant_id'), 'sla_claims', ['tenant_id'], unique=False)
    op.create_index(op.f('ix_sla_claims_decision'), 'sla_claims', ['decision'], unique=False)


def downgrade() -> None:
    op.drop_table('sla_claims')
