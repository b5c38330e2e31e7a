"""Tickets: faults and questions with their SLA clocks, comments and evidence

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-01 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0035'
down_revision = '0034'
branch_labels = None
depends_on = None

WHEN = gpulease.db.tables.UtcDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'tickets',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('tenant_id', sa.String(length=32), nullable=True),
        sa.Column('instance_id', sa.String(length=32), nullable=True),
        sa.Column('node_id', sa.String(length=32), nullable=True),
        sa.Column('gpu_index', sa.Integer(), nullable=True),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('severity', sa.String(length=2), nullable=False),
        sa.Column('summary', sa.String(length=300), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=True),
        sa.Column('opened_by', sa.String(length=64), nullable=False),
        sa.Column('opened_at', WHEN, nullable=False),
        sa.Column('acknowledged_at', WHEN, nullable=True),
        sa.Column('mitigated_at', WHEN, nullable=True),
        sa.Column('resolved_at', WHEN, nullable=True),
        sa.Column('response_due', WHEN, nullable=True),
        sa.Column('mitigation_due', WHEN, nullable=True),
        sa.Column('resolution_due', WHEN, nullable=True),
        sa.Column('warned', sa.String(length=64), server_default='', nullable=False),
        sa.Column('next_warning_at', WHEN, nullable=True),
        sa.Column('fault_key', sa.String(length=100), nullable=True),
        sa.Column('updated_at', WHEN, nullable=True),
        sa.ForeignKeyConstraint(['node_id'], ['nodes.id']),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('fault_key'),
    )
    op.create_index('ix_tickets_tenant_id', 'tickets', ['tenant_id'])
    op.create_index('ix_tickets_instance_id', 'tickets', ['instance_id'])
    op.create_index('ix_tickets_node_id', 'tickets', ['node_id'])
    op.create_index('ix_tickets_status', 'tickets', ['status'])
    op.create_index('ix_tickets_next_warning_at', 'tickets', ['next_warning_at'])
    op.create_table(
        'ticket_entries',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('ticket_id', sa.String(length=32), nullable=False),
        sa.Column('at', WHEN, nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('actor', sa.String(length=64), nullable=False),
        sa.Column('body', sa.Text(), nullable=False),
        sa.Column('ref', sa.String(length=64), nullable=True),
        sa.Column('internal', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['ticket_id'], ['tickets.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_ticket_entries_ticket_id', 'ticket_entries', ['ticket_id'])


def downgrade() -> None:
    op.drop_table('ticket_entries')
    op.drop_table('tickets')
