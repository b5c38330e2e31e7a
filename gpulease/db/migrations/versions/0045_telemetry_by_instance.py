"""An index on an instance's telemetry by time: its charts read a day or a week of it, its
page the newest summary of each GPU

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-02 04:30:00
"""

from __future__ import annotations

from alembic import op

revision = '0045'
down_revision = '0044'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_telemetry_summaries_instance_received', 'telemetry_summaries',
                    ['instance_id', 'received_at'])


def downgrade() -> None:
    op.drop_index('ix_telemetry_summaries_instance_received',
                  table_name='telemetry_summaries')
