"""A tenant's power actions on its own delivered instance: a server rebooted (GracefulRestart)
or power cycled (ForceRestart) through its BMC, one server of a cluster or all; a container
restarted on its engine. Refused with what to do for the wrong kind, an unknown server, an
instance not delivered, a reader, another tenant, and a second action while one is being
sent. Nothing is erased and the lease runs on. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.domain.accounts import Role
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.services.instances import power
from gpulease.services.instances import views as instances
from gpulease.services.money import leases
from gpulease.testing.callers import TenantCtx, auth, new_tenant, new_user
from gpulease.testing.factories import container, deliver, node_name_of, place, sim
from gpulease.worker.runner import Worker
from tests.web.console import signed_in


def _requests(fleet: Platform, name: str) -> dict[str, int]:
    return dict(sim(fleet).snapshot(name).get("requests", {}))


def test_a_tenant_reboots_then_power_cycles_its_server(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    name = node_name_of(fleet, tenant, iid)
    lease_before = leases.show_lease(fleet, tenant.principal, iid)
    asked = power.request_power(fleet, tenant.principal, iid, "reboot")
    assert asked.status == "queued" and asked.node is None
    worker.run_until_idle()
    (done,) = power.power_actions(fleet, tenant.principal, iid).items
    assert done.status == "done" and done.finished_at is not None
    assert done.status_reason == f"reboot: GracefulRestart accepted by {name}"
    assert _requests(fleet, name).get("graceful_restart") == 1
    assert not _requests(fleet, name).get("force_restart")

    power.request_power(fleet, tenant.principal, iid, "power_cycle", node=name)
    worker.run_until_idle()
    latest = power.power_actions(fleet, tenant.principal, iid).items[0]
    assert (latest.action, latest.status, latest.node) == ("power_cycle", "done", name)
    assert _requests(fleet, name).get("force_restart") == 1
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready" and view.nodes[0].status == "active"
    assert leases.show_lease(fleet, tenant.principal, iid) == lease_before  # runs on, unchanged
    said = [st.message or "" for st in view.stages if st.stage == "power"]
    assert said and "reboot asked for" in said[0]


def test_a_container_is_restarted_on_its_engine(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = container(fleet, tenant, worker, key)
    host = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    power.request_power(fleet, tenant.principal, iid, "restart")
    worker.run_until_idle()
    (done,) = power.power_actions(fleet, tenant.principal, iid).items
    assert done.status == "done" and done.status_reason == f"restart: restart accepted by {host}"
    assert sim(fleet).snapshot(host)["containers"][iid]["restarts"] == 1
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"


def test_what_cannot_be_asked_is_refused_with_what_to_do(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    box = container(fleet, tenant, worker, key)
    with pytest.raises(InvalidInput, match="is bare metal: `reboot`"):
        power.request_power(fleet, tenant.principal, iid, "restart")
    with pytest.raises(InvalidInput, match="is a container: it is restarted"):
        power.request_power(fleet, tenant.principal, box, "reboot")
    with pytest.raises(InvalidInput, match="is not a server of"):
        power.request_power(fleet, tenant.principal, iid, "reboot", node="nobody")
    reader = new_user(fleet, tenant, Role.READER)
    with pytest.raises(Forbidden):
        power.request_power(fleet, reader.principal, iid, "reboot")
    with pytest.raises(NotFound):
        power.request_power(fleet, new_tenant(fleet).principal, iid, "reboot")
    pending = place(fleet, tenant, key)
    with pytest.raises(Conflict, match="is pending; power actions are for a delivered"):
        power.request_power(fleet, tenant.principal, pending, "reboot")
    first = power.request_power(fleet, tenant.principal, iid, "reboot")
    with pytest.raises(Conflict, match=f"{first.id} on {iid} is still being sent"):
        power.request_power(fleet, tenant.principal, iid, "power_cycle")
    assert [a.id for a in power.power_actions(fleet, tenant.principal, iid).items] == [first.id]
    assert power.power_actions(fleet, reader.principal, iid).items[0].id == first.id  # readers see


def test_the_api_and_the_console_send_it_and_show_it(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    with TestClient(create_app(fleet)) as client:
        wrong = client.post(f"/api/v1/instances/{iid}/power", json={"action": "shutdown"},
                            headers=auth(tenant.token))
        assert wrong.status_code == 422 and "reboot" in wrong.text  # the allowed values
        asked = client.post(f"/api/v1/instances/{iid}/power", json={"action": "reboot"},
                            headers=auth(tenant.token))
        assert asked.status_code == 202 and asked.json()["status"] == "queued"
        again = client.post(f"/api/v1/instances/{iid}/power", json={"action": "reboot"},
                            headers=auth(tenant.token))
        assert again.status_code == 409 and "still being sent" in again.json()["detail"]
        worker.run_until_idle()
        listed = client.get(f"/api/v1/instances/{iid}/power", headers=auth(tenant.token))
        assert [a["status"] for a in listed.json()["items"]] == ["done"]

        signed_in(fleet, tenant, client)
        page = client.get(f"/console/instances/{iid}")
        assert 'id="power-form"' in page.text and 'id="power-actions"' in page.text
        unticked = client.post(f"/console/instances/{iid}/power", data={"action": "reboot"})
        assert unticked.status_code == 422 and "Tick the box" in unticked.text
        sent = client.post(f"/console/instances/{iid}/power",
                           data={"action": "power_cycle", "confirmed": "true"},
                           follow_redirects=False)
        assert sent.status_code == 303
        shown = client.get(f"/console/instances/{iid}")
        assert shown.text.count("<tr><td>") >= 2 and "queued" in shown.text
        worker.run_until_idle()
        client.post("/console/lang", data={"to": "zh_CN"})
        zh = client.get(f"/console/instances/{iid}").text
        assert "强制重启" in zh and "已完成" in zh and "排队中" not in zh
