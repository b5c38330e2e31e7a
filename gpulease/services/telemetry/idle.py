"""Idle GPUs: for each instance and GPU, the share of the last hour and day its platform
telemetry (the agent's per-minute windows, each weighed by its length) shows utilisation
under GPULEASE_IDLE_UTIL_PCT. The tenant reads it per instance and for all its live
instances (`gpulease instances --idle`); an instance idle GPULEASE_IDLE_NOTICE_SHARE of a
day, with most of the day seen, is told once a day (notice `instance_idle`, webhook event
`instance.idle`). Windows stored before migration 0060 carry no utilisation column and
are not counted."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from gpulease.db.repositories import get_instance
from gpulease.db.tables import IdleNotice, Instance, TelemetrySummary
from gpulease.domain.accounts import Principal
from gpulease.domain.phrases import phrase
from gpulease.domain.states import InstanceStatus
from gpulease.ports.records import Records
from gpulease.schemas import GpuIdleView, IdleShare, IdleView
from gpulease.services.platform.outbox import Notice, post_notice

SPANS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
SEEN_FOR_NOTICE = 0.8  # of the day, at least, before an instance is said idle
LIVE = (InstanceStatus.READY.value, InstanceStatus.RELEASING.value)

Sums = dict[str, dict[str, dict[int, tuple[float, float]]]]  # span → instance → gpu


def _sums(s: Session, instance_ids: Sequence[str], now: datetime, threshold: float) -> Sums:
    """(idle seconds, seen seconds) per span, instance and GPU: one grouped query a span."""
    found: Sums = {span: defaultdict(dict) for span in SPANS}
    if not instance_ids:
        return found
    t = TelemetrySummary
    for span, length in SPANS.items():
        rows = s.execute(
            select(t.instance_id, t.gpu_index,
                   func.sum(case((t.util_avg_pct < threshold, t.window_s), else_=0.0)),
                   func.sum(t.window_s))
            .where(t.instance_id.in_(list(instance_ids)), t.received_at > now - length,
                   t.util_avg_pct.is_not(None), t.window_s.is_not(None))
            .group_by(t.instance_id, t.gpu_index))
        for iid, index, idle, seen in rows:
            found[span][iid][index] = (float(idle or 0.0), float(seen or 0.0))
    return found


def _share(pairs: Sequence[tuple[float, float]]) -> IdleShare:
    idle = sum(i for i, _ in pairs)
    seen = sum(s for _, s in pairs)
    return IdleShare(idle_pct=round(100 * idle / seen, 1) if seen > 0 else None,
                     seen_s=round(seen / max(len(pairs), 1), 1))


def _view(inst: Instance, sums: Sums, threshold: float) -> IdleView:
    gpus = sorted(set(sums["hour"][inst.id]) | set(sums["day"][inst.id]))
    per_gpu = [GpuIdleView(index=g, **{span: _share(
        [sums[span][inst.id][g]] if g in sums[span][inst.id] else []) for span in SPANS})
        for g in gpus]
    return IdleView(instance_id=inst.id, name=inst.name, kind=inst.kind, gpus=inst.gpu_count,
                    threshold_pct=threshold, per_gpu=per_gpu, **{
                        span: _share(list(sums[span][inst.id].values())) for span in SPANS})


def instance_idle(p: Records, actor: Principal, instance_id: str) -> IdleView:
    """One instance's idle shares (its tenant's users, or an operator)."""
    threshold = p.settings.idle_util_pct
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        return _view(inst, _sums(s, [inst.id], p.clock.now(), threshold), threshold)


def tenant_idle(p: Records, actor: Principal) -> list[IdleView]:
    """The idle shares of every delivered instance of the caller's tenant, most idle over
    the day first."""
    tenant = actor.require_tenant()
    threshold = p.settings.idle_util_pct
    with p.db.read() as s:
        insts = s.scalars(select(Instance).where(Instance.tenant_id == tenant,
                                                 Instance.status.in_(LIVE))
                          .order_by(Instance.ordered_at).limit(1000)).all()
        sums = _sums(s, [i.id for i in insts], p.clock.now(), threshold)
    views = [_view(i, sums, threshold) for i in insts]
    return sorted(views, key=lambda v: -(v.day.idle_pct or 0.0))


def notice_idle(p: Records, limit: int = 500) -> int:
    """Tell the tenants whose delivered instances were idle most of the last day (once a
    day each); returns how many were told."""
    now = p.clock.now()
    threshold, share = p.settings.idle_util_pct, p.settings.idle_notice_share
    told = 0
    recent = select(IdleNotice.instance_id).where(IdleNotice.noticed_at > now - SPANS["day"])
    with p.db.write() as s:
        insts = s.scalars(select(Instance).where(
            Instance.status == InstanceStatus.READY.value, Instance.id.not_in(recent))
            .order_by(Instance.ordered_at).limit(limit)).all()
        sums = _sums(s, [i.id for i in insts], now, threshold)
        for inst in insts:
            day = _view(inst, sums, threshold).day
            seen_enough = day.seen_s >= SEEN_FOR_NOTICE * SPANS["day"].total_seconds()
            if day.idle_pct is None or not seen_enough or day.idle_pct < 100 * share:
                continue
            post_notice(s, Notice(inst.tenant_id, "instance_idle", phrase(
                "{instance}'s GPUs were idle {idle:.0f}% of the last 24 hours (utilisation "
                "under {threshold:g}%). It is billed all the same: release it if it is not "
                "needed (`gpulease release {instance}`).", instance=inst.id,
                idle=day.idle_pct, threshold=threshold), inst.id), now)
            row = s.get(IdleNotice, inst.id)
            if row is None:
                s.add(IdleNotice(instance_id=inst.id, noticed_at=now, idle_pct=day.idle_pct))
            else:
                row.noticed_at, row.idle_pct = now, day.idle_pct
            told += 1
    return told
