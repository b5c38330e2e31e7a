"""Who may call each route, declared on the route itself.

Every route of the app carries ``openapi_extra=access(...)``: the callers it serves, and
whether its path names something a tenant owns. The OpenAPI document shows it to API users
(``x-access``), and tests/api/test_access.py enumerates the app's routes, refuses one
without a declaration, and calls each as every kind of caller to hold the app to it:

- a caller not listed gets 401 (no credential, or a credential of the wrong kind) or 403
  (a user whose role may not);
- on an ``owned`` route, a listed tenant user of *another* tenant gets 404, as if the
  thing did not exist, and no answer ever carries another tenant's data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

KEY = "x-access"


class Caller(StrEnum):
    ANYONE = "anyone"  # no credential at all (booting servers, sign-in, docs)
    AGENT = "agent"  # a node agent's credential (glan_…)
    OPERATOR = "operator"  # the provider's staff
    ADMIN = "admin"  # a tenant admin
    MEMBER = "member"  # a tenant member: orders and releases
    READER = "reader"  # a tenant reader: reads only
    METER = "meter"  # a metering source's token: reports usage, nothing else


TENANT_USERS = (Caller.ADMIN, Caller.MEMBER, Caller.READER)
ORDERING = (Caller.ADMIN, Caller.MEMBER)
EVERY_USER = (Caller.OPERATOR, *TENANT_USERS)


@dataclass(frozen=True)
class Access:
    callers: frozenset[Caller]
    owned: bool  # the path names a tenant's thing: other tenants get 404

    def allows(self, caller: Caller) -> bool:
        return Caller.ANYONE in self.callers or caller in self.callers


def access(*callers: Caller, owned: bool = False) -> dict[str, Any]:
    """The route's declaration, to pass as ``openapi_extra``."""
    if not callers:
        raise ValueError("a route serves at least one kind of caller")
    return {KEY: {"callers": sorted(c.value for c in callers), "owned": owned}}


def declared(openapi_extra: dict[str, Any] | None) -> Access | None:
    """What a route declared (None: nothing, which the authorization test refuses)."""
    entry = (openapi_extra or {}).get(KEY)
    if entry is None:
        return None
    return Access(frozenset(Caller(c) for c in entry["callers"]), bool(entry["owned"]))
