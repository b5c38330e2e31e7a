"""schemathesis against the app: for every operation of the OpenAPI document, generated
requests (valid and invalid, bounded) sent as the callers the operation serves in turn (a
tenant admin, an operator, a node agent, from its x-access declaration: an operation both
a tenant and an operator call gets both tokens) must get no server error, only
statuses the document declares, and answers that match their schemas. On SQLite and
PostgreSQL (its integer and numeric columns are where 2^63 offsets and 10^30 amounts broke).

Requests stay in-process: enrolling a node (which would contact the BMC URL it is given)
and registering a webhook (whose host would be resolved) are sent as a tenant reader, who
is refused before anything leaves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
)

from gpulease.api.access import Caller
from gpulease.api.app import create_app
from gpulease.compose import make_platform
from gpulease.demo import seed_demo_fleet
from gpulease.domain.accounts import Role
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.agents import credentials as agent_credentials
from gpulease.testing.callers import new_tenant
from gpulease.testing.platforms import database_url, make_settings, start_migrated
from gpulease.testing.servers import listing_app

EXAMPLES = 5  # per operation and database: bounded, the suite's time is shared
# Would reach out to a generated address (a BMC to enroll; a webhook's host to resolve):
# sent as a reader, who is refused before anything leaves.
SENDS_TRAFFIC = {("POST", "/api/v1/nodes"), ("PUT", "/api/v1/webhook")}


schema = schemathesis.openapi.from_dict(listing_app().openapi())
schema.config.update(base_url="http://127.0.0.1")  # only names the URLs: calls stay in-process


@dataclass
class Target:
    app: FastAPI
    tokens: dict[Caller, str]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("fuzz")
    with database_url(request.param, tmp) as url:
        start_migrated(url)
        p = make_platform(make_settings(url, tmp / "data"))
        p.settings.rate_limit_per_token_per_min = 1_000_000
        p.settings.rate_limit_anonymous_per_min = 1_000_000
        p.settings.rate_limit_auth_failures_per_min = 1_000_000
        p.db.migrate()
        seed_demo_fleet(p, 1)
        try:
            yield Target(create_app(p), _tokens(p))
        finally:
            p.db.dispose()


def _tokens(p: Platform) -> dict[Caller, str]:
    tenant = new_tenant(p, "fuzz")
    _, op = accounts.create_operator(p, "fuzz-operator@example.com", "Op")
    operator = accounts.authenticate(p, op.token)
    node = seed_node(p)
    token = agent_credentials.operator_enrollment(p, operator, node)
    _, credential = agent_credentials.register(p, token, "fuzz", None, None)
    reader = accounts.add_user(p, tenant.principal, accounts.Person("reader@fuzz.example", "R",
                                                                    Role.READER, None))
    return {Caller.ADMIN: tenant.token, Caller.OPERATOR: op.token or "",
            Caller.AGENT: credential,
            Caller.READER: accounts.issue_token(p, tenant.principal, "r", reader.id, 1).token
            or ""}


def seed_node(p: Platform) -> str:
    from sqlalchemy import select

    from gpulease.db.tables import Node

    with p.db.read() as s:
        node = s.scalar(select(Node.id).limit(1))
    assert node is not None
    return node


SENT: Counter[tuple[str, str]] = Counter()  # cases sent per operation so far


def _caller(operation: Any) -> Caller | None:
    """Who sends this case: the kinds of caller the operation serves in turn (a tenant
    admin, an operator, a node agent), so an operation both a tenant and an operator call
    is sent with both tokens."""
    method, path = operation.method.upper(), operation.path
    if (method, path) in SENDS_TRAFFIC:
        return Caller.READER  # refused (403) before any traffic
    callers = operation.definition.raw.get("x-access", {}).get("callers", [])
    serving = [who for who in (Caller.ADMIN, Caller.OPERATOR, Caller.AGENT)
               if who.value in callers]
    if not serving:
        return None
    SENT[(method, path)] += 1
    return serving[SENT[(method, path)] % len(serving)]


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_the_api_conforms_to_its_document(case: Any, target: Target) -> None:
    # This database's app, in-process, for the case and for the checks' own requests.
    schema.app = case.operation.schema.app = case.operation.app = target.app
    caller = _caller(case.operation)
    headers = {"Authorization": f"Bearer {target.tokens[caller]}"} if caller else {}
    # Not held here: business rules beyond the document (an SSH key that parses, a usage
    # window that has ended) answer 422 naming the field, and the app is lenient where the
    # document is strict (unknown query parameters are ignored, a number is a Unix time);
    # the credential added above turns schemathesis's "no Authorization" cases into valid ones.
    case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance,
                                                             negative_data_rejection])
