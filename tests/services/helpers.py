from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import func, select

from gpulease.compose import make_platform
from gpulease.db.tables import Event, GpuAllocation, IdempotencyKey, Instance, Node
from gpulease.platform import Platform
from tests.conftest import PG_URL, make_settings, pg_url_for, start_migrated


def counts(p: Platform) -> dict[str, int]:
    """Row counts of everything an order writes."""
    with p.db.read() as s:
        return {
            t.__tablename__: s.scalar(select(func.count()).select_from(t)) or 0
            for t in (Instance, GpuAllocation, Event, IdempotencyKey)
        } | {"allocated_nodes": s.scalar(
            select(func.count()).select_from(Node).where(Node.instance_id.is_not(None))) or 0}


def double_allocated_gpus(p: Platform) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(
            select(GpuAllocation.gpu_id).where(GpuAllocation.released_at.is_(None))
            .group_by(GpuAllocation.gpu_id).having(func.count() > 1)))


def node_by_name(p: Platform, name: str) -> Node:
    with p.db.read() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        assert node is not None
        return node


def nodes_of(p: Platform, sku: str, region: str) -> list[Node]:
    with p.db.read() as s:
        return list(s.scalars(select(Node).where(Node.sku == sku, Node.region == region,
                                                 Node.pool == "bare_metal").order_by(Node.name)))


def machine_platform(db: str, **overrides: Any) -> tuple[Platform, str | None]:
    """A migrated platform for a hypothesis machine (one per example): SQLite in a temp
    directory, or a fresh PostgreSQL schema (returned, for `drop_schema`)."""
    data = Path(tempfile.mkdtemp())
    schema = None
    if db == "sqlite":
        url = f"sqlite:///{data / 'm.db'}"
    else:
        schema = f"m_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
        url = pg_url_for(schema)
    start_migrated(url)  # the caller's migrate() finds it at head
    p = make_platform(make_settings(url, data, **overrides))
    return p, schema


def drop_schema(p: Platform, schema: str | None) -> None:
    p.db.dispose()
    if schema:
        with psycopg.connect(PG_URL.replace("+psycopg", ""), autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def drive_token(p: Platform, node_name: str) -> str | None:
    """The one-time agent token on the node's current config drive (what the agent of a
    freshly booted OS, or of the cleaning ramdisk, enrolls with)."""
    import re

    from gpulease.configdrive import read_iso
    from gpulease.db.tables import ConfigDrive

    with p.db.read() as s:
        iso = s.scalar(select(ConfigDrive.iso).join(Node, Node.id == ConfigDrive.node_id)
                       .where(Node.name == node_name).order_by(ConfigDrive.created_at.desc())
                       .limit(1))
    if iso is None:
        return None
    found = re.search(r"GPULEASE_AGENT_TOKEN=(glat_[A-Za-z0-9_-]+)", read_iso(iso)["user-data"])
    return found.group(1) if found else None
