"""GPU quotas: the operator caps the GPUs a tenant may hold at once, in all (`*`) or of one
offer (`sku@region`: its share of an offer's scarce stock, so one tenant's script cannot
take both H100 servers in Ningxia in a second). An order beyond a quota is refused (409)
with the quota, what the tenant holds and who can raise it. The check runs inside the
order's transaction, after its nodes are claimed, under a lock on the tenant's row, so two
orders at once are counted one after the other and cannot both pass one quota."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpulease.db.tables import GpuQuota, Instance, Tenant
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput, NotFound, QuotaExceeded
from gpulease.domain.phrases import phrase
from gpulease.domain.states import INSTANCE_LIVE
from gpulease.lifecycle.history import by
from gpulease.ports.records import Priced, Records
from gpulease.schemas import GpuQuotaView

ALL = "*"
_LIVE = [status.value for status in INSTANCE_LIVE]


def _offers(p: Priced) -> list[str]:
    """What a quota may name: every offer's and container offer's sku@region."""
    found = {o.id for o in p.catalog.offers}
    found |= {f"{c.host_sku}@{c.region}" for c in p.catalog.container_offers}
    return sorted(found)


def _held(s: Session, tenant_id: str, offer: str) -> int:
    q = select(func.coalesce(func.sum(Instance.gpu_count), 0)).where(
        Instance.tenant_id == tenant_id, Instance.status.in_(_LIVE))
    if offer != ALL:
        sku, _, region = offer.partition("@")
        q = q.where(Instance.sku == sku, Instance.region == region)
    return int(s.scalar(q) or 0)


def _view(s: Session, row: GpuQuota) -> GpuQuotaView:
    return GpuQuotaView(tenant_id=row.tenant_id, offer=row.offer, max_gpus=row.max_gpus,
                        held=_held(s, row.tenant_id, row.offer), reason=row.reason,
                        set_by=row.set_by, set_at=row.set_at)


def set_quota(p: Priced, actor: Principal, tenant_id: str, offer: str, max_gpus: int,
              reason: str | None = None) -> GpuQuotaView:
    """Operator: cap the tenant's GPUs held at once, in all (`*`) or of one offer. A quota
    below what it holds refuses new orders only; nothing running is touched."""
    actor.require_operator()
    if offer != ALL and offer not in _offers(p):
        raise InvalidInput("offer", "Unknown offer {offer!r}: name '*' (every GPU) or an "
                           "offer as sku@region.", [ALL, *_offers(p)], offer=offer)
    with p.db.write() as s:
        if s.get(Tenant, tenant_id) is None:
            raise NotFound("No tenant {tenant_id}.", tenant_id=tenant_id)
        row = s.get(GpuQuota, (tenant_id, offer))
        if row is None:
            row = GpuQuota(tenant_id=tenant_id, offer=offer, max_gpus=max_gpus,
                           set_by=by(actor), set_at=p.clock.now())
            s.add(row)
        row.max_gpus, row.reason, row.set_by, row.set_at = (
            max_gpus, reason, by(actor), p.clock.now())
        s.flush()
        return _view(s, row)


def remove_quota(p: Records, actor: Principal, tenant_id: str, offer: str) -> None:
    actor.require_operator()
    with p.db.write() as s:
        gone = s.execute(delete(GpuQuota).where(GpuQuota.tenant_id == tenant_id,
                                                GpuQuota.offer == offer))
        if not gone.rowcount:  # type: ignore[attr-defined]
            raise NotFound("Tenant {tenant_id} has no quota for {offer}.",
                           tenant_id=tenant_id, offer=offer)


def list_quotas(p: Records, actor: Principal, tenant_id: str | None = None
                ) -> list[GpuQuotaView]:
    """A tenant's quotas with what it holds under each: a tenant's users read their own
    (no `tenant_id`), an operator names the tenant."""
    if tenant_id is None:
        tenant_id = actor.require_tenant()
    else:
        actor.require_operator()
    with p.db.read() as s:
        rows = s.scalars(select(GpuQuota).where(GpuQuota.tenant_id == tenant_id)
                         .order_by(GpuQuota.offer)).all()
        return [_view(s, row) for row in rows]


def check_order(s: Session, tenant_id: str, sku: str, region: str, gpus: int) -> None:
    """Inside an order's transaction, its instance already written: refuse it when the
    tenant would hold more than a quota allows. The tenant's row is locked first, so a
    second order at once waits here and counts this one."""
    # FOR NO KEY UPDATE: the order's own instance row already holds a key-share lock on
    # the tenant (its foreign key); a plain FOR UPDATE would wait on the other order's and
    # deadlock with it (seen on PostgreSQL), this one only waits on the other's check
    s.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update(key_share=True))
    quotas = s.scalars(select(GpuQuota).where(
        GpuQuota.tenant_id == tenant_id, GpuQuota.offer.in_([ALL, f"{sku}@{region}"]))).all()
    for quota in quotas:
        held = _held(s, tenant_id, quota.offer)  # this order's GPUs among them
        if held > quota.max_gpus:
            raise QuotaExceeded(
                "Your GPU quota {scope} is {max_gpus} at once: you hold {held} and this "
                "order needs {gpus}. Release an instance, or ask the provider to raise the "
                "quota (operators: `gpulease quota set`).",
                scope=phrase("in all") if quota.offer == ALL else phrase(
                    "for {offer}", offer=quota.offer),
                max_gpus=quota.max_gpus, held=held - gpus, gpus=gpus)
