"""A server's identity: one spelling per BMC endpoint and the system's UUID

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 10:30:00
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def _key(address: str) -> str | None:
    """domain/enrollment.bmc_key as it was written for this migration."""
    if not address.startswith(("http://", "https://")):
        return None
    parts = urlsplit(address.strip())
    host = (parts.hostname or "").lower()
    port = parts.port if parts.port not in (80, 443) else None
    path = re.sub(r"/+", "/", parts.path).rstrip("/")
    netloc = f"[{host}]" if ":" in host else host
    return f"{netloc}{f':{port}' if port else ''}{path if '/Systems/' in path else ''}"


def upgrade() -> None:
    with op.batch_alter_table('nodes') as batch:
        batch.add_column(sa.Column('bmc_key', sa.String(length=300), nullable=True))
        batch.add_column(sa.Column('system_uuid', sa.String(length=64), nullable=True))
    op.create_index(op.f('ix_nodes_bmc_key'), 'nodes', ['bmc_key'], unique=False)
    op.create_index(op.f('ix_nodes_system_uuid'), 'nodes', ['system_uuid'], unique=False)
    nodes = sa.table('nodes', sa.column('id', sa.String), sa.column('bmc_address', sa.String),
                     sa.column('bmc_key', sa.String))
    bind = op.get_bind()
    for node_id, address in bind.execute(sa.select(nodes.c.id, nodes.c.bmc_address)).all():
        key = _key(address or "")
        if key:
            bind.execute(nodes.update().where(nodes.c.id == node_id).values(bmc_key=key))


def downgrade() -> None:
    op.drop_index(op.f('ix_nodes_system_uuid'), table_name='nodes')
    op.drop_index(op.f('ix_nodes_bmc_key'), table_name='nodes')
    with op.batch_alter_table('nodes') as batch:
        batch.drop_column('system_uuid')
        batch.drop_column('bmc_key')
