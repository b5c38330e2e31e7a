"""The binding writer on SQLite and PostgreSQL: a node bound to an instance holds its GPUs
once; unbinding lets go of the instance, the GPUs and the address and fences claims; a
claim from a read made before a fence binds nothing."""

from __future__ import annotations

from sqlalchemy import func, insert, select

from gpulease.db.tables import GpuAllocation, Instance, Node
from gpulease.demo import seed_demo_fleet
from gpulease.domain.states import INSTANCE, INSTANCE_STAGE, NodeStatus
from gpulease.lifecycle.binding import bind_read, fence, hold_gpus, release_gpus, unbind
from gpulease.lifecycle.writer import initial
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx


def _instance(p: Platform, t: TenantCtx, iid: str) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        s.execute(insert(Instance), {
            "id": iid, "tenant_id": t.tenant_id, "created_by": t.principal.user_id,
            "kind": "bare_metal",
            "sku": "h100-80g-x8", "region": "ningxia-1", "term": "day", "image_id": "x",
            "node_count": 1, "gpu_count": 8, "ssh_keys": "", "ordered_at": now,
            "attempts": 0, "stage_polls": 0, "stage_requests": 0, "metered_hours": 0,
            **initial(Instance, INSTANCE), **initial(Instance, INSTANCE_STAGE)})


def _free_node(p: Platform) -> tuple[str, int]:
    with p.db.read() as s:
        row = s.execute(select(Node.id, Node.generation).where(
            Node.status == NodeStatus.AVAILABLE.value, Node.pool == "bare_metal")
            .limit(1)).one()
    return row[0], row[1]


def _active(p: Platform, node_id: str) -> int:
    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(GpuAllocation).where(
            GpuAllocation.node_id == node_id, GpuAllocation.released_at.is_(None))) or 0


def test_a_bound_node_holds_its_gpus_until_it_is_unbound(
    platform: Platform, tenant: TenantCtx
) -> None:
    seed_demo_fleet(platform, 1)
    _instance(platform, tenant, "i-bound")
    node_id, generation = _free_node(platform)
    now = platform.clock.now()
    with platform.db.write() as s:
        assert bind_read(s, node_id, generation, now, actor="test", instance_id="i-bound")
        held = hold_gpus(s.connection(), [node_id], "i-bound", now)
    assert held[node_id] == list(range(8)) and _active(platform, node_id) == 8
    with platform.db.write() as s:
        node = s.get(Node, node_id)
        assert node is not None
        assert (node.status, node.instance_id, node.generation) == (
            NodeStatus.ALLOCATED.value, "i-bound", generation + 1)
        node.ip_address = "192.0.2.7"
        assert unbind(s, node, now) == "i-bound"
    assert _active(platform, node_id) == 0
    with platform.db.read() as s:
        node = s.get(Node, node_id)
        assert node is not None
        assert (node.instance_id, node.ip_address, node.generation) == (
            None, None, generation + 2)


def test_a_claim_read_before_a_fence_binds_nothing(platform: Platform, tenant: TenantCtx) -> None:
    seed_demo_fleet(platform, 1)
    _instance(platform, tenant, "i-late")
    node_id, generation = _free_node(platform)
    with platform.db.write() as s:
        node = s.get(Node, node_id)
        assert node is not None
        fence(node)  # an operator's drain, say, between the read and the claim
    with platform.db.write() as s:
        assert not bind_read(s, node_id, generation, platform.clock.now(), actor="test",
                             instance_id="i-late")
    with platform.db.read() as s:
        assert s.scalar(select(Node.instance_id).where(Node.id == node_id)) is None


def test_a_slice_is_released_without_its_neighbours(platform: Platform, tenant: TenantCtx) -> None:
    seed_demo_fleet(platform, 1)
    with platform.db.read() as s:
        host = s.scalar(select(Node.id).where(Node.pool == "container").limit(1))
    assert host is not None
    now = platform.clock.now()
    for iid in ("i-a", "i-b"):
        _instance(platform, tenant, iid)
        with platform.db.write() as s:
            hold_gpus(s.connection(), [host], iid, now, count=2)
    assert _active(platform, host) == 4
    with platform.db.write() as s:
        release_gpus(s, host, now, "i-a")
    assert _active(platform, host) == 2
