"""Who is asking, and what their role lets them do."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpulease.domain.errors import Forbidden


class Role(StrEnum):
    OPERATOR = "operator"
    ADMIN = "admin"  # tenant admin: orders, manages the tenant's users and tokens
    MEMBER = "member"  # orders and releases
    READER = "reader"  # reads only
    METER = "meter"  # a metering source (network collector, storage): reports usage only


TENANT_ROLES = (Role.ADMIN, Role.MEMBER, Role.READER)
_CAN_ORDER = frozenset({Role.ADMIN, Role.MEMBER})


@dataclass(frozen=True)
class Principal:
    user_id: str
    role: Role
    tenant_id: str | None  # None only for operators
    token_id: str | None = None  # the API token (or console session) the request came with

    @property
    def is_operator(self) -> bool:
        return self.role is Role.OPERATOR

    @property
    def is_meter(self) -> bool:
        return self.role is Role.METER

    def require_meter(self) -> None:
        """Usage comes from a meter's token (or an operator's, correcting by hand)."""
        if not (self.is_meter or self.is_operator):
            raise Forbidden("Usage is reported with a meter token (POST /api/v1/meters); "
                            "ask your provider's operations team.")

    def require_operator(self) -> None:
        if not self.is_operator:
            raise Forbidden("This needs an operator token; ask your provider's operations team.")

    def require_tenant(self) -> str:
        if self.tenant_id is None:
            raise Forbidden(
                "Operators do not own instances; use a tenant user's token to order or release."
            )
        return self.tenant_id

    def require_order_rights(self) -> str:
        tenant = self.require_tenant()
        if self.role not in _CAN_ORDER:
            raise Forbidden(
                "Role {self_role_value!r} may only read; ask a tenant admin for a member token.",
                self_role_value=self.role.value)
        return tenant

    def require_tenant_admin(self) -> str:
        tenant = self.require_tenant()
        if self.role is not Role.ADMIN:
            raise Forbidden("Only a tenant admin can manage users and tokens.")
        return tenant
