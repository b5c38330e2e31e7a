"""the audit trail: append-only, MAC-chained

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 00:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'audit_log',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('request_id', sa.String(length=64), nullable=True),
        sa.Column('user_id', sa.String(length=32), nullable=True),
        sa.Column('token_id', sa.String(length=32), nullable=True),
        sa.Column('role', sa.String(length=16), nullable=True),
        sa.Column('tenant_id', sa.String(length=32), nullable=True),
        sa.Column('source', sa.String(length=64), nullable=True),
        sa.Column('action', sa.String(length=200), nullable=False),
        sa.Column('target', sa.String(length=300), nullable=True),
        sa.Column('outcome', sa.Integer(), nullable=False),
        sa.Column('prev_mac', sa.String(length=64), nullable=False),
        sa.Column('mac', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log')),
        sa.UniqueConstraint('seq', name=op.f('uq_audit_log_seq')),
    )
    op.create_index(op.f('ix_audit_log_at'), 'audit_log', ['at'], unique=False)
    op.create_index(op.f('ix_audit_log_tenant_id'), 'audit_log', ['tenant_id'], unique=False)
    op.create_table(
        'audit_head',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('last_seq', sa.Integer(), nullable=False),
        sa.Column('last_mac', sa.String(length=64), nullable=False),
        sa.Column('pruned_through', sa.Integer(), nullable=False),
        sa.Column('pruned_mac', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_head')),
    )
    op.execute("INSERT INTO audit_head (id, last_seq, last_mac, pruned_through, pruned_mac) "
               "VALUES (1, 0, '', 0, '')")


def downgrade() -> None:
    op.drop_table('audit_head')
    op.drop_index(op.f('ix_audit_log_tenant_id'), table_name='audit_log')
    op.drop_index(op.f('ix_audit_log_at'), table_name='audit_log')
    op.drop_table('audit_log')
