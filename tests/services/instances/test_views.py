"""The instance list as the API sends it: the same bytes as the page's JSON at every step of
its instances' lives, each summary built again only when something in it changed; a
server's address is shown once it passed its acceptance, not while the suite runs."""

from __future__ import annotations

import json

import pytest

from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import node_by_name
from gpulease.worker.pipelines import instances as instance_pipeline
from gpulease.worker.pipelines import nodes as node_pipeline
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker


def assert_sent_is_the_page(p: Platform, t: TenantCtx, **query: object) -> str:
    sent = instances.list_instances_json(p, t.principal, **query)  # type: ignore[arg-type]
    page = instances.list_instances(p, t.principal, **query)  # type: ignore[arg-type]
    assert sent == page.model_dump_json(), query
    return sent


QUERIES: list[dict[str, object]] = [
    {}, {"limit": 2}, {"limit": 2, "offset": 1}, {"offset": 50}, {"expand": "stages"},
    {"status": "ready"}, {"status": "pending"}, {"status": "released", "limit": 1}]


def test_the_sent_list_is_the_pages_json_through_delivery_and_release(
        fleet: Platform, tenant: TenantCtx, worker: Worker, key: str) -> None:
    assert_sent_is_the_page(fleet, tenant)  # no instances: an empty page
    ids = [orders.place_order(fleet, tenant.principal, OrderRequest(ssh_keys=[key], **req))[0].id
           for req in (dict(kind="container", offer="rtx4090-24g-container", gpus=2),
                       dict(sku="h100-80g-x8", region="ningxia-1"))]
    ordered = [assert_sent_is_the_page(fleet, tenant, **q) for q in QUERIES]
    worker.run_until_idle()
    delivered = assert_sent_is_the_page(fleet, tenant)
    assert delivered != ordered[0]
    items = json.loads(delivered)["items"]
    assert {i["status"] for i in items} == {"ready"} and all(i["ip_address"] for i in items)
    for q in QUERIES:
        assert_sent_is_the_page(fleet, tenant, **q)

    actions.release_instance(fleet, tenant.principal, ids[0])
    releasing = assert_sent_is_the_page(fleet, tenant)
    assert [i["status"] for i in json.loads(releasing)["items"] if i["id"] == ids[0]] == [
        "releasing"]
    worker.run_until_idle()
    for q in QUERIES:
        assert_sent_is_the_page(fleet, tenant, **q)


def test_an_unchanged_summary_is_not_built_again(
        fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(3):
        orders.place_order(fleet, tenant.principal, OrderRequest(
            ssh_keys=[key], kind="container", offer="rtx4090-24g-container", gpus=1))
    worker.run_until_idle()
    built: list[str] = []
    assemble = instances.assemble_view

    def counting(*args: object, **kw: object) -> object:
        built.append(args[1].id)  # type: ignore[attr-defined]
        return assemble(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(instances, "assemble_view", counting)
    first = instances.list_instances_json(fleet, tenant.principal)
    again = instances.list_instances_json(fleet, tenant.principal)
    # built once each, on the first page (the views the list_instances check made aside)
    assert again == first
    assert sorted(built) == sorted(i["id"] for i in json.loads(first)["items"])
    built.clear()
    instances.list_instances_json(fleet, tenant.principal)
    assert built == []  # nothing moved: every summary kept
    moved = json.loads(first)["items"][1]["id"]
    actions.release_instance(fleet, tenant.principal, moved)
    built.clear()  # the release's own answer
    after = instances.list_instances_json(fleet, tenant.principal)
    assert built == [moved]  # only the released one is built again
    built.clear()
    assert after == instances.list_instances(fleet, tenant.principal).model_dump_json()


def test_a_servers_address_is_shown_only_once_its_acceptance_passed(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        ssh_keys=[key], sku="h100-80g-x8", region="ningxia-1"))[0].id
    drive(fleet, instance_pipeline.PIPELINE)
    seen: set[str] = set()
    for _ in range(40):  # bounded: step by step through the deploy
        drive(fleet, node_pipeline.PIPELINE, limit=1)
        view = instances.show_instance(fleet, tenant.principal, iid)
        if view.status == "ready":
            break
        stage = view.nodes[0].stage if view.nodes else None
        if stage in ("verify", "detach_media"):  # under test; configured, not yet delivered
            seen.add(stage)
            known = node_by_name(fleet, view.nodes[0].name).ip_address
            assert bool(known) == (stage == "detach_media")  # reported at configure…
            assert (view.nodes[0].ip_address, view.nodes[0].ssh_command) == (None, None)
            assert (view.ip_address, view.ssh_command) == (None, None)  # …and not shown
        drive(fleet, instance_pipeline.PIPELINE)
    assert seen == {"verify", "detach_media"} and view.status == "ready"
    assert view.nodes[0].ip_address and view.nodes[0].ssh_command and view.ssh_command
