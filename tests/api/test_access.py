"""The generic authorization test: every route of the app, enumerated from the app itself,
declares who may call it (gpulease/api/access.py); each is called as anonymous, as another
tenant's reader, member and admin, as a node agent, a meter and an operator, and must answer what
its declaration says (401, 403, 404, or not a refusal) without ever carrying the owning
tenant's data. A new route without a declaration fails here. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from starlette.routing import Mount

from gpulease.api.access import Access, Caller, declared
from gpulease.api.app import create_app
from gpulease.db.tables import Node
from gpulease.domain.accounts import Role
from gpulease.platform import Platform
from gpulease.schemas.tickets import TicketOpen
from gpulease.services.accounts import identity as accounts
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.support import tickets
from gpulease.testing.callers import TenantCtx, new_tenant, ssh_key
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.testing.servers import listing_app
from gpulease.worker.runner import Worker

# Not routes a caller is authorized for: files under these mounts are public by nature.
PUBLIC_MOUNTS = {"/console/static", "/console/vendor", "/api/v1/docs/static",
                 "/api/v1/docs/vendor"}
MAC = "52:54:00:00:00:01"
SIGN_OUT = "/console/logout"
AUDITS = {"/api/v1/audit", "/console/audit"}  # a caller's own trail lists its attempts


@dataclass
class World:
    """Tenant A owns the things the paths name; the callers come from elsewhere."""
    owner: TenantCtx
    ids: dict[str, str]  # path parameter -> A's (or the platform's) thing
    secrets: set[str]  # A's identifiers the calls name: only in answers that name them
    unsent: set[str]  # A's data no caller ever sends: never in an outsider's answer
    callers: dict[Caller, str | None]  # the credential each caller presents


def _user_token(p: Platform, admin: TenantCtx, role: Role) -> tuple[str, str]:
    user = accounts.add_user(p, admin.principal,
                             accounts.Person(f"{role.value}-{admin.tenant_id}@example.com",
                                             role.value, role, None))
    return user.id, accounts.issue_token(p, admin.principal, role.value, user.id, 1).token or ""


@pytest.fixture
def world(fleet: Platform, worker: Worker) -> World:
    fleet.settings.rate_limit_per_token_per_min = 100_000
    fleet.settings.rate_limit_anonymous_per_min = 100_000
    fleet.settings.rate_limit_auth_failures_per_min = 100_000
    fleet.settings.egress_allow = ["hooks.example.com"]  # registered, never resolved or sent
    clock = MovableClock(datetime(2026, 11, 10, 8, 0, tzinfo=UTC))
    fleet.clock = clock
    owner = new_tenant(fleet, "owner")
    instance = deliver(fleet, owner, worker, ssh_key())
    unnamed = deliver(fleet, owner, worker, ssh_key("owner-laptop"), name="owner-training")
    member_id, _ = _user_token(fleet, owner, Role.MEMBER)
    token = accounts.issue_token(fleet, owner.principal, "ci", None, 30)
    operator = new_operator(fleet)
    clock.at = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    invoice_run.run_invoices(fleet, operator, "2026-11", finalize=True)
    with fleet.db.read() as s:
        node = s.query(Node).filter(Node.instance_id == instance).one()
        spare = s.query(Node).filter(Node.instance_id.is_(None)).first()
        assert spare is not None
        node_id, node_ip, spare_id = node.id, node.ip_address, spare.id
    invoice = invoices_of(fleet, owner)[0]
    ticket = tickets.open_by_tenant(fleet, owner.principal, TicketOpen(
        instance_id=instance, summary="GPU 2 is slow")).id
    enrollment = agent_credentials.operator_enrollment(fleet, operator, spare_id)
    _, agent_credential = agent_credentials.register(fleet, enrollment, "spare", None, None)
    stranger = new_tenant(fleet, "stranger")
    callers: dict[Caller, str | None] = {
        Caller.ANYONE: None, Caller.AGENT: agent_credential,
        Caller.READER: _user_token(fleet, stranger, Role.READER)[1],
        Caller.MEMBER: _user_token(fleet, stranger, Role.MEMBER)[1],
        Caller.ADMIN: stranger.token,
        Caller.OPERATOR: accounts.issue_token(fleet, operator, "op", None, 1).token,
        Caller.METER: accounts.create_meter(fleet, operator, "collector").token.token,
    }
    ids = {"instance_id": instance, "node_id": node_id, "user_id": member_id,
           "token_id": token.id, "tenant_id": owner.tenant_id, "invoice_id": invoice,
           "certificate_id": "ec-0000000000", "command_id": "cmd-0000000000",
           "image_id": "img-0000000000", "drive_id": "cd-0000000000", "name": "ubuntu",
           "action": "drain", "claim_id": "slc-000000000000", "record_id": "1",
           "addon_id": "public-bandwidth", "fabric_id": "ib-ningxia-1-1",
           "rack_id": "ningxia-1-r01", "ticket_id": ticket, "key_id": "AKIA0000000000000000",
           "run_id": "bk-000000000000", "boot_id": "rb-0000000000",
           "offer": "h100-80g-x8@ningxia-1"}
    secrets = {owner.tenant_id, instance, member_id, token.id, invoice, node_id, ticket}
    unsent = {unnamed, "owner-training", "owner-laptop", "owner@example.com",
              f"member-{owner.tenant_id}@example.com", owner.principal.user_id,
              str(owner.principal.token_id), "GL2026-000001"} | (
        {node_ip} if node_ip else set())
    return World(owner, ids, secrets, unsent, callers)


def new_operator(p: Platform) -> Any:
    _, token = accounts.create_operator(p, "root@provider.example", "Root")
    return accounts.authenticate(p, token.token)


def invoices_of(p: Platform, t: TenantCtx) -> list[str]:
    from gpulease.services.money.invoices import views as invoices

    return [i.id for i in invoices.list_invoices(p, t.principal).items]


# A body that passes validation, so that what answers is the authorization.
BODIES: dict[tuple[str, str], Any] = {
    ("PUT", "/api/v1/me/password"): {"password": "correct horse battery staple"},
    ("POST", "/api/v1/tenants"): {"name": "acme", "admin_email": "a@acme.example",
                                  "admin_name": "A"},
    ("POST", "/api/v1/users"): {"email": "new@example.com", "name": "N", "role": "reader"},
    ("POST", "/api/v1/tokens"): {"name": "t", "expires_in_days": 1},
    ("POST", "/api/v1/instances"): {"kind": "container", "offer": "rtx4090-24g-container",
                                    "gpus": 1, "ssh_keys": [ssh_key()]},
    ("POST", "/api/v1/instances/review"): {
        "kind": "container", "offer": "rtx4090-24g-container", "gpus": 1,
        "ssh_keys": [ssh_key()]},
    ("POST", "/api/v1/nodes"): {"bmc": "http://127.0.0.1:9/redfish/v1/Systems/1",
                                "username": "u", "password": "p"},
    ("POST", "/api/v1/fabrics"): {"id": "ib-new", "region": "ningxia-1"},
    ("PATCH", "/api/v1/fabrics/{fabric_id}"): {"rate_gbps": 400},
    ("PATCH", "/api/v1/racks/{rack_id}"): {"zone": "hall-a"},
    ("PATCH", "/api/v1/nodes/{node_id}"): {"rack": "ningxia-1-r01"},
    ("POST", "/api/v1/tickets"): {"instance_id": "{instance_id}", "summary": "it is slow"},
    ("POST", "/api/v1/tickets/{ticket_id}/comments"): {"body": "any news?"},
    ("POST", "/api/v1/tickets/{ticket_id}/repair-window"): {"start": "2030-01-01T00:00:00Z",
                                                            "hours": 2},
    ("POST", "/api/v1/tickets/{ticket_id}/repair-window/answer"): {"accept": True},
    ("POST", "/api/v1/instances/{instance_id}/restores"): {"snapshot_id": "none"},
    ("PATCH", "/api/v1/instances/{instance_id}/backup-policy"): {"every_hours": 0},
    ("PUT", "/api/v1/storage/quotas/{tenant_id}"): {"quota_gb": 10},
    ("POST", "/api/v1/instances/{instance_id}/image"): {"name": "env"},
    ("POST", "/api/v1/instances/{instance_id}/power"): {"action": "reboot"},
    ("PUT", "/api/v1/nodes/{node_id}/faults"): {"faults": []},
    ("POST", "/api/v1/nodes/{node_id}/repair"): {"reason": "fan noise"},
    ("POST", "/api/v1/nodes/{node_id}/repaired"): {"parts": "fan 2: A1 -> B7"},
    ("POST", "/api/v1/racks"): {"id": "r-new", "region": "ningxia-1", "zone": "a"},
    ("POST", "/api/v1/quotes"): {"sku": "h100-80g-x8", "region": "ningxia-1"},
    ("POST", "/api/v1/tenants/{tenant_id}/top-ups"): {"amount": "10", "reference": "t"},
    ("POST", "/api/v1/tenants/{tenant_id}/suspend"): {"reason": "test"},
    ("POST", "/api/v1/tenants/{tenant_id}/payouts"): {"amount": "1", "reference": "p"},
    ("PUT", "/api/v1/billing-profile"): {"title": "Acme 有限公司"},
    ("PUT", "/api/v1/instances/{instance_id}/addons/{addon_id}"): {"quantity": "10"},
    ("POST", "/api/v1/instances/{instance_id}/addons/{addon_id}/charge"): {"quantity": "10"},
    ("PUT", "/api/v1/tenants/{tenant_id}/credit-limit"): {"credit_limit": "10"},
    ("PUT", "/api/v1/tenants/{tenant_id}/gpu-quotas/{offer}"): {"max_gpus": 64},
    ("PUT", "/api/v1/budget"): {"monthly_budget": "1000000"},
    ("POST", "/api/v1/instances/{instance_id}/renew"): {"periods": 1},
    ("PUT", "/api/v1/instances/{instance_id}/auto-renew"): {"auto_renew": False},
    ("PUT", "/api/v1/webhook"): {"url": "https://hooks.example.com/gpulease"},
    ("POST", "/api/v1/usage"): {"records": [{
        "key": "k-1", "instance_id": "{instance_id}", "kind": "egress_gb", "quantity": "1",
        "started_at": "2026-12-01T00:00:00Z", "ended_at": "2026-12-01T01:00:00Z"}]},
    ("POST", "/api/v1/invoices/run"): {"period": "2026-11"},
    ("POST", "/api/v1/meters"): {"name": "netflow-1"},
    ("POST", "/api/v1/invoices/{invoice_id}/credit-notes"): {"reason": "r", "amount": "1"},
    ("POST", "/api/v1/images"): {"id": "custom-1", "name": "custom", "os": "Debian 12",
                                 "gpu_vendor": "any", "url": "https://images.example.com/a.img",
                                 "checksum": "sha256:" + "0" * 64},
    ("POST", "/api/v1/advise"): {"params": "7B", "workload": "inference"},
    ("POST", "/api/v1/agent/register"): {"token": "glat_unknown", "hostname": "h"},
    ("POST", "/api/v1/agent/telemetry"): {"gpus": []},
    ("POST", "/api/v1/bmc-events/{node_id}"): {"Context": "glbe_unknown", "Events": []},
    ("POST", "/api/v1/agent/commands/{command_id}/result"): {"ok": True, "result": {}},
    ("POST", "/api/v1/agent/commands/{command_id}/progress"): {"moved": 1, "total": 2},
    ("POST", "/console/login"): {"email": "nobody@example.com", "password": "x"},
    ("POST", "/console/orders"): {"kind": "container", "offer": "rtx4090-24g-container",
                                  "gpus": 1, "ssh_key": ssh_key()},
    ("POST", "/console/lang"): {"to": "zh_CN"},
    ("POST", "/console/account/password"): {"password": "twelve chars!", "again": "x"},
    ("POST", "/console/account/tokens"): {"name": "authz"},
    ("POST", "/console/account/users"): {"email": "authz@example.com", "name": "A",
                                         "role": "reader"},
    ("POST", "/console/account/webhook"): {"url": "http://127.0.0.1:9/h"},
    ("POST", "/console/tenants"): {"name": "authz-made", "admin_email": "authz@made.example",
                                   "admin_name": "A"},
    ("POST", "/console/tenants/{tenant_id}/top-up"): {"amount": "1", "reference": "authz"},
    ("POST", "/console/tenants/{tenant_id}/credit-limit"): {"credit_limit": "0"},
    ("POST", "/console/instances/{instance_id}/power"): {"action": "reboot",
                                                        "confirmed": "true"},
    ("POST", "/console/tickets"): {"instance_id": "{instance_id}", "summary": "authz"},
    ("POST", "/console/tickets/{ticket_id}/comment"): {"body": "authz"},
    ("POST", "/console/invoices/run"): {"period": "2026-11"},
    ("POST", "/console/prices"): {"text": "not a catalog"},
    ("POST", "/console/nodes/enroll"): {"bmc": "not a url", "username": "u",
                                        "password": "p"},
}
QUERIES = {"/media/ipxe": {"mac": MAC}, "/api/v1/invoices/export": {"period": "2026-11"},
           "/api/v1/instances/{instance_id}/events": {"timeout": 0.5},
           "/console/instances/{instance_id}/events": {"timeout": 0.5},
           "/api/v1/revenue": {"start": "2026-01", "end": "2026-12"}}


def routes(app: FastAPI) -> Iterator[tuple[str, str, APIRoute]]:
    """Every (method, full path, route) the app serves, included routers resolved."""
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            for method in sorted((context.methods or set()) - {"HEAD", "OPTIONS"}):
                yield method, str(context.path), route


def test_every_route_declares_who_may_call_it() -> None:
    app = listing_app()
    missing = [f"{m} {path}" for m, path, r in routes(app) if declared(r.openapi_extra) is None]
    assert not missing, ("Declare who may call these routes (openapi_extra=access(...), "
                         f"gpulease/api/access.py): {missing}")
    others = [c for c in iter_route_contexts(app.routes)
              if not isinstance(c.original_route, APIRoute)]
    assert {c.path for c in others if isinstance(c.original_route, Mount)} <= PUBLIC_MOUNTS


def _call(client: TestClient, method: str, path: str, caller: Caller,
          credential: str | None, ids: dict[str, str]) -> Any:
    url = re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)
    headers = {}
    if credential is not None:  # the console's session cookie is a token too
        headers["Cookie" if path.startswith("/console") else "Authorization"] = (
            f"gpulease_session={credential}" if path.startswith("/console")
            else f"Bearer {credential}")
    body = BODIES.get((method, path))
    if body is not None:
        body = json.loads(json.dumps(body).replace("{instance_id}", ids["instance_id"]))
    kwargs: dict[str, Any] = {"headers": headers, "params": QUERIES.get(path, {}),
                              "follow_redirects": False}
    if body is not None:
        kwargs["data" if path.startswith("/console") else "json"] = body
    return client.request(method, url, **kwargs)


def expected(access: Access, caller: Caller, console: bool) -> set[int] | None:
    """The statuses the declaration allows for this caller (None: any but a refusal; for a
    route open to anyone, any answer: it checks what it is sent, a password or a one-time
    token, itself)."""
    if Caller.ANYONE in access.callers:
        return set(range(200, 500))
    if access.allows(caller):
        if access.owned and caller in (Caller.ADMIN, Caller.MEMBER, Caller.READER):
            return {404}
        return None
    if caller is Caller.ANYONE or caller is Caller.AGENT:
        return {303} if console else {401}
    if access.callers == {Caller.AGENT}:
        return {401}
    if caller is Caller.METER and console:
        return {303}  # a meter's token is no console session
    return {403}


def test_each_route_answers_each_caller_as_declared(fleet: Platform, world: World) -> None:
    app = create_app(fleet)
    order = [Caller.ANYONE, Caller.AGENT, Caller.READER, Caller.MEMBER, Caller.ADMIN,
             Caller.METER, Caller.OPERATOR]  # the operator last: its calls change things
    wrong: list[str] = []
    with TestClient(app, raise_server_exceptions=False) as client:
        for caller in order:
            # Signing out ends the session the cookie holds: the last call of each caller.
            for method, path, route in sorted(routes(app), key=lambda r: r[1] == SIGN_OUT):
                access = declared(route.openapi_extra)
                r = _call(client, method, path, caller, world.callers[caller], world.ids)
                want = (expected(access, caller, path.startswith("/console"))
                        if access is not None else None)
                if access is None:
                    pass  # reported by the declaration test
                elif path == "/readyz" and r.status_code == 503:
                    pass  # "not ready" (no worker in this world) is the probe's answer
                elif r.status_code >= 500 and not (r.status_code == 502 and want is None):
                    # 502: an allowed caller's call reached a device that did not answer
                    wrong.append(f"{caller.value}: {method} {path} -> {r.status_code}")
                elif want is not None and r.status_code not in want:
                    wrong.append(f"{caller.value}: {method} {path} -> {r.status_code}, "
                                 f"declared {sorted(want)}: {r.text[:200]}")
                elif want is None and r.status_code in (401, 403):
                    wrong.append(f"{caller.value}: {method} {path} -> {r.status_code}, "
                                 f"declared allowed: {r.text[:200]}")
                if caller is not Caller.OPERATOR:
                    # Ids a caller sent may come back (a 404 names what was asked for; the
                    # caller's own audit trail lists its attempts); the rest never may.
                    sent = url_and_body(method, path, world.ids)
                    leaked = [s for s in world.unsent if s in r.text] + [
                        s for s in world.secrets
                        if s not in sent and path not in AUDITS and s in r.text]
                    if leaked:
                        wrong.append(f"{caller.value}: {method} {path} answered the owner's "
                                     f"{leaked}")
    assert not wrong, "\n".join(wrong)


def url_and_body(method: str, path: str, ids: dict[str, str]) -> str:
    url = re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)
    return url + json.dumps(BODIES.get((method, path))).replace("{instance_id}",
                                                               ids["instance_id"])

