"""A tenant's billing profile (the buyer on its invoices): set by a tenant admin or an
operator, checked for its invoice type (domain/billing/profile.py), and copied onto each
invoice as it is finalized, so a later change never alters an issued invoice."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import BillingProfile
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.billing.profile import InvoiceType, Profile, profile_problems
from gpulease.domain.errors import Forbidden, InvalidInput, NotFound
from gpulease.lifecycle.history import by
from gpulease.ports.records import Records
from gpulease.schemas.money import BillingProfileIn, BillingProfileView
from gpulease.services.money.wallet import tenant_of

FIELDS = ("title", "tax_id", "address", "phone", "bank", "bank_account", "invoice_type",
          "email")


def _view(row: BillingProfile) -> BillingProfileView:
    return BillingProfileView(tenant_id=row.tenant_id, updated_at=row.updated_at,
                              **{f: getattr(row, f) for f in FIELDS})


def show_profile(p: Records, actor: Principal, tenant_id: str | None = None
                 ) -> BillingProfileView:
    tenant = tenant_of(actor, tenant_id)
    with p.db.read() as s:
        row = s.get(BillingProfile, tenant)
        if row is None:
            raise NotFound("No billing profile yet: a tenant admin sets one with "
                           "`gpulease billing-profile --title …` (PUT /api/v1/billing-profile); "
                           "invoices print it from then on.")
        return _view(row)


def set_profile(p: Records, actor: Principal, body: BillingProfileIn,
                tenant_id: str | None = None) -> BillingProfileView:
    """A tenant admin's own profile, or any tenant's for an operator; 422 naming the first
    missing or malformed field."""
    tenant = tenant_of(actor, tenant_id)
    if not actor.is_operator and actor.role is not Role.ADMIN:
        raise Forbidden("Only a tenant admin (or an operator) can change the billing profile.")
    data = body.model_dump()
    data["tax_id"] = data["tax_id"].upper()
    problems = profile_problems(Profile(**{**data,
                                           "invoice_type": InvoiceType(data["invoice_type"])}))
    if problems:
        field, text = problems[0]
        raise InvalidInput(field, text)
    now = p.clock.now()
    with p.db.write() as s:
        row = s.get(BillingProfile, tenant, with_for_update=True)
        if row is None:
            row = BillingProfile(tenant_id=tenant)
            s.add(row)
        for field in FIELDS:
            setattr(row, field, data[field])
        row.updated_at, row.updated_by = now, by(actor)
        s.flush()
        return _view(row)


def snapshots(s: Session, tenant_ids: Sequence[str]) -> dict[str, str]:
    """Each tenant's profile as the JSON an invoice keeps (tenants without one: absent)."""
    rows = s.scalars(select(BillingProfile).where(BillingProfile.tenant_id.in_(tenant_ids)))
    return {r.tenant_id: json.dumps({f: getattr(r, f) for f in FIELDS}, ensure_ascii=False,
                                    sort_keys=True) for r in rows}


def buyer_of(snapshot: str | None) -> BillingProfileView | None:
    return BillingProfileView(**json.loads(snapshot)) if snapshot else None
