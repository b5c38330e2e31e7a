"""Orders end to end through the services and the worker, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from gpulease.db.tables import Event
from gpulease.domain.errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, OutOfStock
from gpulease.domain.states import DEPLOY_ORDER
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.agents import evidence
from gpulease.services.catalog import offers as catalog
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import counts, double_allocated_gpus, nodes_of
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker

H100 = dict(sku="h100-80g-x8", region="ningxia-1")


def order(p: Platform, t: TenantCtx, key: str, **kw: object) -> str:
    req = OrderRequest(ssh_keys=[key], **{**H100, **kw})  # type: ignore[arg-type]
    view, created = orders.place_order(p, t.principal, req)
    assert created
    return view.id


def test_bare_metal_is_delivered_with_every_stage_timed(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = order(fleet, tenant, key)
    pending = instances.show_instance(fleet, tenant.principal, iid)
    assert pending.status == "pending" and pending.nodes[0].status == "allocated"
    assert pending.image == "ubuntu22.04-cuda12.4-pytorch2.5"  # the offer's default
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready", view.status_reason
    assert view.ip_address and view.ssh_command == f"ssh root@{view.ip_address}"
    assert view.delivery_seconds is not None and view.delivery_seconds >= 0
    stages = [st.stage for st in view.stages]
    assert stages[:2] == ["ordered", "deploying"]
    assert [st for st in stages if st in {d.value for d in DEPLOY_ORDER}] == [
        d.value for d in DEPLOY_ORDER]
    assert stages[-1] == "ready"
    assert view.nodes[0].status == "active" and view.nodes[0].gpus == list(range(8))
    assert view.simulated
    # the simulated server saw the whole deploy
    snap = fleet.drivers.fleet.snapshot(view.nodes[0].name)  # type: ignore[union-attr]
    assert snap["power"] == "on" and snap["media"] is None
    assert snap["booted_media"].endswith("ubuntu22.04-cuda12.4-pytorch2.5.iso")
    assert snap["config"]["keys"] == 1


def test_root_password_is_shown_once(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = order(fleet, tenant, key)
    with pytest.raises(Conflict, match="shown once it is ready"):
        actions.reveal_credentials(fleet, tenant.principal, iid)
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).credentials_available
    creds = actions.reveal_credentials(fleet, tenant.principal, iid)
    assert len(creds.root_password) == 20
    with pytest.raises(Gone, match="already shown"):
        actions.reveal_credentials(fleet, tenant.principal, iid)
    assert not instances.show_instance(fleet, tenant.principal, iid).credentials_available


def test_release_erases_and_frees_the_node(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = order(fleet, tenant, key)
    worker.run_until_idle()
    node_name = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    releasing = actions.release_instance(fleet, tenant.principal, iid)
    assert releasing.status == "releasing"
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "released" and view.released_at is not None
    node_stages = [st.stage for st in view.stages if st.node and st.stage.startswith(
        ("clean", "erase"))]
    assert node_stages == ["clean_shutdown", "clean_attach_media", "clean_power_on",
                           "clean_wait_agent", "erase", "erase result", "clean_power_off"]
    assert [st.stage for st in view.stages][-1] == "released"
    # one sealed certificate per disk, for the tenant to download
    certs = evidence.instance_certificates(fleet, tenant.principal, iid)[0]
    assert [c["device"] for c in certs] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert all(c["passed"] and c["simulated"] and len(c["digest"]) == 64 for c in certs)
    assert certs[0]["certificate"]["lease"] == iid
    assert evidence.certificate(fleet, tenant.principal, certs[0]["id"])["id"] == certs[0]["id"]
    assert "cleaning" in [st.stage for st in view.stages]
    snap = fleet.drivers.fleet.snapshot(node_name)  # type: ignore[union-attr]
    assert snap["erase_count"] == 1 and snap["power"] == "off" and snap["config"] is None
    stock = {o.id: o.stock for o in catalog.catalog_view(fleet).offers}
    assert stock["h100-80g-x8@ningxia-1"] == 2
    assert double_allocated_gpus(fleet) == []
    # releasing again is harmless
    assert actions.release_instance(fleet, tenant.principal, iid).status == "released"


def test_out_of_stock_says_what_is_free_where(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    order(fleet, tenant, key)
    order(fleet, tenant, key)
    before = counts(fleet)
    with pytest.raises(OutOfStock) as exc:
        order(fleet, tenant, key)
    assert "No free h100-80g-x8 node in ningxia-1" in exc.value.detail
    assert "rtx4090-24g-x8 in sichuan-2: 2" in exc.value.detail
    assert counts(fleet) == before  # nothing written


def test_cluster_lands_on_one_fabric_or_is_refused_with_the_groups(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    with fleet.db.write() as s:
        for i in range(3):  # a second fabric with 3 H100s
            inventory.ensure_fabric(s, "ib-ningxia-1-2", "ningxia-1")
            s.flush()
            add_node(s, fleet, NodeSpec(name=f"h100-b-{i}", fabric_id="ib-ningxia-1-2", **H100))
    iid = order(fleet, tenant, key, kind="cluster", nodes=3)
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.fabric_id == "ib-ningxia-1-2" and len(view.nodes) == 3 and view.gpu_count == 24
    before = counts(fleet)
    with pytest.raises(OutOfStock) as exc:
        order(fleet, tenant, key, kind="cluster", nodes=3)
    assert "free nodes per fabric: ib-ningxia-1-1: 2" in exc.value.detail
    assert "largest group 2" in exc.value.detail
    assert counts(fleet) == before
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready" and all(n.status == "active" for n in view.nodes)


def test_best_fit_keeps_the_larger_fabric_whole(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    with fleet.db.write() as s:
        inventory.ensure_fabric(s, "ib-ningxia-1-2", "ningxia-1")
        s.flush()
        for i in range(4):
            add_node(s, fleet, NodeSpec(name=f"h100-b-{i}", fabric_id="ib-ningxia-1-2", **H100))
    iid = order(fleet, tenant, key, kind="cluster", nodes=2)
    assert instances.show_instance(fleet, tenant.principal, iid).fabric_id == "ib-ningxia-1-1"
    assert instances.show_instance(
        fleet, tenant.principal, order(fleet, tenant, key, kind="cluster", nodes=4)
    ).fabric_id == "ib-ningxia-1-2"


def test_containers_pack_gpus_and_never_share_one(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    container = dict(kind="container", offer="rtx4090-24g-container", sku=None, region=None)
    first = order(fleet, tenant, key, gpus=3, **container)
    second = order(fleet, tenant, key, gpus=5, **container)
    a = instances.show_instance(fleet, tenant.principal, first)
    b = instances.show_instance(fleet, tenant.principal, second)
    assert a.nodes[0].name == b.nodes[0].name  # best fit: fill the busy host first
    assert set(a.nodes[0].gpus).isdisjoint(b.nodes[0].gpus)
    assert a.term == "hour"
    order(fleet, tenant, key, gpus=8, **container)
    with pytest.raises(OutOfStock, match="has 1 free GPUs|has 2 free GPUs|the most free"):
        order(fleet, tenant, key, gpus=2, **container)
    worker.run_until_idle()
    a = instances.show_instance(fleet, tenant.principal, first)
    assert a.status == "ready" and a.ssh_command and "-p " in a.ssh_command
    actions.release_instance(fleet, tenant.principal, first)
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, first).status == "released"
    assert {c.id: c.free_gpus for c in catalog.catalog_view(fleet).container_offers} == {
        "rtx4090-24g-container": 3}
    assert double_allocated_gpus(fleet) == []


@pytest.mark.parametrize(("fields", "field", "accepted_has"), [
    (dict(sku="h200-x8"), "sku", "h100-80g-x8"),
    (dict(region="mars-1"), "region", "ningxia-1"),
    (dict(sku="ascend910b-64g-x8", region="ningxia-1"), "region", "huawei-zone"),
    (dict(image="windows-11"), "image", "ubuntu22.04-cuda12.4-pytorch2.5"),
    (dict(image="ubuntu22.04-cann8-mindspore2.4"), "image", "ubuntu22.04-base"),
    (dict(term="week"), "term", "day"),
    (dict(term="hour"), "term", "month"),
    (dict(kind="cluster", nodes=0), "nodes", None),
    (dict(kind="cluster", nodes=-2), "nodes", None),
    (dict(nodes=2), "nodes", "1"),
    (dict(kind="container", sku=None, region=None, offer="x"), "offer", "rtx4090-24g-container"),
    (dict(kind="container", sku=None, region=None, offer="rtx4090-24g-container", gpus=9),
     "gpus", "8"),
    (dict(kind="container", sku=None, region=None, offer="rtx4090-24g-container",
          term="month"), "term", "hour"),
])
def test_bad_input_names_the_field_and_writes_nothing(
    fleet: Platform, tenant: TenantCtx, key: str, fields: dict, field: str,
    accepted_has: str | None,
) -> None:
    before = counts(fleet)
    try:
        OrderRequest(ssh_keys=[key], **{**H100, **fields})
    except ValidationError as refused:  # out of the request's bounds (a 422 at the API)
        assert refused.errors()[0]["loc"][0] == field
        assert counts(fleet) == before
        return
    with pytest.raises(InvalidInput) as exc:
        order(fleet, tenant, key, **fields)
    assert exc.value.field == field
    if accepted_has:
        assert exc.value.accepted and accepted_has in exc.value.accepted
        assert "Accepted values:" in exc.value.detail
    assert counts(fleet) == before


def test_bad_ssh_key_is_refused_before_anything_is_written(
    fleet: Platform, tenant: TenantCtx
) -> None:
    before = counts(fleet)
    for keys in ([], ["ssh-ed25519 garbage!"]):
        with pytest.raises(InvalidInput) as exc:
            orders.place_order(fleet, tenant.principal, OrderRequest(ssh_keys=keys, **H100))
        assert exc.value.field == "ssh_keys"
    assert counts(fleet) == before


def test_idempotency_key_replays_or_refuses(fleet: Platform, tenant: TenantCtx, key: str) -> None:
    req = OrderRequest(ssh_keys=[key], **H100)
    first, created = orders.place_order(fleet, tenant.principal, req, "order-1")
    again, created_again = orders.place_order(fleet, tenant.principal, req, "order-1")
    assert created and not created_again and again.id == first.id
    assert counts(fleet)["instances"] == 1
    other = OrderRequest(ssh_keys=[key], kind="cluster", nodes=1, **H100)
    with pytest.raises(InvalidInput, match="different request") as exc:
        orders.place_order(fleet, tenant.principal, other, "order-1")
    assert exc.value.field == "Idempotency-Key"
    # keys are per user: another tenant's same key is a new order
    other_tenant = new_tenant(fleet)
    view, created = orders.place_order(fleet, other_tenant.principal, req, "order-1")
    assert created and view.id != first.id


def test_tenants_are_isolated_and_readers_cannot_order(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    from gpulease.domain.accounts import Role
    from gpulease.services.accounts import identity as accounts

    iid = order(fleet, tenant, key)
    stranger = new_tenant(fleet)
    with pytest.raises(NotFound):
        instances.show_instance(fleet, stranger.principal, iid)
    with pytest.raises(NotFound):
        actions.release_instance(fleet, stranger.principal, iid)
    assert instances.list_instances(fleet, stranger.principal).total == 0
    assert instances.list_instances(fleet, tenant.principal).total == 1
    assert instances.list_instances(fleet, operator.principal).total == 1
    reader = accounts.add_user(fleet, tenant.principal, accounts.Person("r@example.com", "R",
                                                                        Role.READER, None))
    token = accounts.issue_token(fleet, tenant.principal, "r", reader.id, 1)
    reader_p = accounts.authenticate(fleet, token.token)
    assert instances.show_instance(fleet, reader_p, iid).id == iid
    with pytest.raises(Forbidden, match="may only read"):
        order(fleet, TenantCtx(reader_p, token.token, tenant.tenant_id), key)
    with pytest.raises(Forbidden):
        inventory.list_nodes(fleet, tenant.principal)


def test_drain_maintenance_and_resume(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str
) -> None:
    op = operator.principal
    busy_id = order(fleet, tenant, key)
    busy = instances.show_instance(fleet, tenant.principal, busy_id).nodes[0].name
    free = next(n.name for n in nodes_of(fleet, **H100) if n.name != busy)
    with pytest.raises(Conflict, match="drain"):
        inventory.maintenance_node(fleet, op, busy, "disk smart warning")
    assert inventory.drain_node(fleet, op, busy, "fan swap").drain_requested
    assert inventory.maintenance_node(fleet, op, free, "fan swap").status == "maintenance"
    with pytest.raises(OutOfStock):
        order(fleet, tenant, key)
    worker.run_until_idle()
    actions.release_instance(fleet, tenant.principal, busy_id)
    worker.run_until_idle()
    drained = inventory.get_node(fleet, op, busy)
    assert drained.status == "maintenance" and drained.instance_id is None
    with pytest.raises(InvalidInput, match="why"):
        inventory.retire_node(fleet, op, free, " ")
    retired = inventory.retire_node(fleet, op, free, "mainboard dead")
    assert (retired.status, retired.status_reason) == ("failed", "mainboard dead")
    with pytest.raises(Conflict, match="set it aside"):
        inventory.retire_node(fleet, op, free, "again")
    assert inventory.resume_node(fleet, op, busy).status == "available"
    assert inventory.resume_node(fleet, op, free).status == "available"
    order(fleet, tenant, key)
    order(fleet, tenant, key)
    with fleet.db.read() as s:  # every move of the node, with who made it
        moves = [(e.from_value, e.to_value, e.actor) for e in s.scalars(
            select(Event).where(Event.resource == "node", Event.kind == "status",
                                Event.resource_id == retired.id).order_by(Event.id))]
    who = f"user:{op.user_id}"
    assert moves == [("available", "maintenance", who), ("maintenance", "failed", who),
                     ("failed", "available", who), ("available", "allocated",
                                                    f"user:{tenant.principal.user_id}")]


def test_the_config_drive_is_served_during_install_and_deleted_after(
    fleet: Platform, tenant: TenantCtx, key: str, server: LiveServer
) -> None:
    import httpx

    from gpulease.configdrive import read_iso

    fleet.settings.public_url = server.url
    iid = order(fleet, tenant, key, name="train-01")
    name = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    worker = Worker(fleet, owner="t")
    url = None
    for _ in range(50):
        worker.step()
        url = fleet.drivers.fleet.snapshot(name).get("usb")  # type: ignore[union-attr]
        if url:
            break
    assert url and url.startswith(f"{server.url}/media/config/")
    files = read_iso(httpx.get(url).raise_for_status().content)
    assert '"hostname": "train-01"' in files["user-data"]
    assert "GPULEASE_AGENT_TOKEN=glat_" in files["user-data"]
    # nothing of the tenant's: its key goes on the server at configure, after verify
    assert key.split()[1] not in files["user-data"] and "$2b$" not in files["user-data"]
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
    gone = httpx.get(url)
    assert gone.status_code == 404 and "deleted once" in gone.json()["detail"]
