"""Lease periods: each renewal adds periods with their own term, price and dates

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01 08:30:00
"""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

import gpulease.db.tables

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def _after(start: datetime, term: str, n: int) -> datetime:
    """n periods of `term` from `start` on the UTC calendar the leases were made with."""
    if term == 'day':
        return start + timedelta(days=n)
    months = n * (12 if term == 'year' else 1)
    month = start.month - 1 + months
    year, month = start.year + month // 12, month % 12 + 1
    return start.replace(year=year, month=month,
                         day=min(start.day, calendar.monthrange(year, month)[1]))


def upgrade() -> None:
    table = op.create_table(
        'lease_periods',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('lease_id', sa.String(length=16), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('term', sa.String(length=8), nullable=False),
        sa.Column('price', sa.Numeric(precision=14, scale=2), nullable=False),
        sa.Column('anchor_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('run_index', sa.Integer(), nullable=False),
        sa.Column('starts_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('ends_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column('refunded_at', gpulease.db.tables.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['lease_id'], ['leases.id'],
                                name=op.f('fk_lease_periods_lease_id_leases')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_lease_periods')),
        sa.UniqueConstraint('lease_id', 'seq', name=op.f('uq_lease_periods_lease_id')),
    )
    op.create_index(op.f('ix_lease_periods_lease_id'), 'lease_periods', ['lease_id'],
                    unique=False)
    # Leases from before: their periods of their (last) term, back from their end.
    leases = sa.table('leases', sa.column('id', sa.String),
                      sa.column('term', sa.String), sa.column('unit_price', sa.Numeric),
                      sa.column('periods', sa.Integer),
                      sa.column('starts_at', gpulease.db.tables.UtcDateTime()),
                      sa.column('ends_at', gpulease.db.tables.UtcDateTime()))
    rows = []
    for lease in op.get_bind().execute(sa.select(leases)):
        start = lease.starts_at if lease.starts_at.tzinfo else lease.starts_at.replace(tzinfo=UTC)
        end = lease.ends_at if lease.ends_at.tzinfo else lease.ends_at.replace(tzinfo=UTC)
        count = max(int(lease.periods), 1)
        for k in range(1, count + 1):
            rows.append(dict(lease_id=lease.id, seq=k, term=lease.term,
                             price=lease.unit_price, anchor_at=start, run_index=k,
                             starts_at=_after(start, lease.term, k - 1) if k > 1 else start,
                             ends_at=end if k == count else _after(start, lease.term, k),
                             refunded_at=None))
    if rows:
        op.bulk_insert(table, rows)


def downgrade() -> None:
    op.drop_table('lease_periods')
