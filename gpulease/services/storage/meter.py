"""Object storage metered and bounded: each tenant's bucket is measured once a day of the
platform calendar, after the day ends, and what it holds beyond the free allowance is
charged in GB-days at the catalog's `object-storage` price (a GB-month ÷ 30), under a key
made from the day, so a rerun bills nothing twice. A day the worker missed (at most a week
back) is charged at the size measured when it catches up. The same measurement bounds the
bucket: its admins are told at 80 % and at 100 % of the quota, and the platform starts no
backup of its own past the quota (a lapsed lease's last backups excepted: data first)."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import StorageAccount
from gpulease.domain.phrases import Phrase, phrase
from gpulease.ports.object_store import ObjectStoreError
from gpulease.ports.records import Priced, Records, Stored
from gpulease.services.money.metering import QUANTUM, record_for
from gpulease.services.money.usage_bounds import Usage
from gpulease.services.platform.outbox import Notice, post_notice

log = logging.getLogger("gpulease.storage")
GB = 10**9
CATCH_UP_DAYS = 7
METER = "meter:storage"


def quota_bytes(p: Records, account: StorageAccount) -> int:
    return int((account.quota_gb or p.settings.storage_quota_gb) * GB)


def over_quota(s: Session, p: Records, tenant: str) -> Phrase | None:
    """Why the platform starts no backup into the tenant's bucket now, or None."""
    account = s.get(StorageAccount, tenant)
    if account is None or account.used_bytes is None:
        return None
    quota = quota_bytes(p, account)
    if account.used_bytes < quota:
        return None
    return phrase("Your bucket holds {used} GB, its quota is {quota} GB: delete snapshots "
                  "you no longer need (your S3 key, prefix backups/) or ask your provider "
                  "for a larger quota.", used=f"{account.used_bytes / GB:,.1f}",
                  quota=f"{quota / GB:,.0f}")


def counted(s: Session, tenant: str, added_bytes: int) -> None:
    """Bytes a platform run just added to the bucket, counted until the next measurement."""
    account = s.get(StorageAccount, tenant, with_for_update=True)
    if account is not None and account.used_bytes is not None and added_bytes > 0:
        account.used_bytes += added_bytes


def _day_bounds(day: date, p: Records) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=p.settings.zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0),
                           tzinfo=p.settings.zone).astimezone(UTC)
    return start, end


def first_day_to_meter(p: Records, created_at: datetime) -> str:
    """A new account is metered from the day it was made (its metered_through: the day
    before)."""
    return (created_at.astimezone(p.settings.zone).date() - timedelta(days=1)).isoformat()


def meter_buckets(p: Stored, limit: int = 100) -> int:
    """Measure and charge every bucket whose yesterday is not charged yet; returns how many
    buckets were measured."""
    store = p.object_store()
    if store is None:
        return 0
    now = p.clock.now()
    yesterday = now.astimezone(p.settings.zone).date() - timedelta(days=1)
    with p.db.read() as s:
        due = list(s.execute(select(StorageAccount.tenant_id, StorageAccount.bucket).where(
            or_(StorageAccount.metered_through.is_(None),
                StorageAccount.metered_through < yesterday.isoformat()))
            .order_by(StorageAccount.tenant_id).limit(limit)))
    done = 0
    for tenant, bucket in due:
        try:
            used = store.bucket_bytes(bucket)  # outside the transaction: slow I/O
        except ObjectStoreError as exc:
            log.warning("bucket %s not measured: %s; at the next sweep", bucket, exc)
            continue
        with p.db.write() as s:
            account = s.get(StorageAccount, tenant, with_for_update=True)
            if account is None:
                continue
            last = date.fromisoformat(account.metered_through or first_day_to_meter(
                p, account.created_at))
            day = max(last + timedelta(days=1), yesterday - timedelta(days=CATCH_UP_DAYS - 1))
            while day <= yesterday:
                _charge_day(s, p, tenant, day, used, now)
                day += timedelta(days=1)
            account.metered_through = max(last, yesterday).isoformat()
            measured(s, p, account, used, now)
        done += 1
    return done


def _charge_day(s: Session, p: Priced, tenant: str, day: date, used: int,
                now: datetime) -> None:
    billable = Decimal(max(used - int(p.settings.storage_free_gb * GB), 0)) / GB
    quantity = billable.quantize(QUANTUM)
    if quantity <= 0:
        return
    start, end = _day_bounds(day, p)
    record_for(s, p, tenant, None, Usage(f"object-storage:{day.isoformat()}", "object_gb_days",
                                         quantity, start, end, METER), now)


def measured(s: Session, p: Records, account: StorageAccount, used: int,
              now: datetime) -> None:
    """The new size kept; its admins told once when it crosses 80 % and 100 % of the quota
    (again after it fell below)."""
    account.used_bytes, account.measured_at = used, now
    quota = quota_bytes(p, account)
    level = 100 if used >= quota else 80 if used >= 0.8 * quota else 0
    if level > account.quota_warned:
        kind = "storage_full" if level == 100 else "storage_80"
        figures = {"bucket": account.bucket, "used": f"{used / GB:,.1f}",
                   "quota": f"{quota / GB:,.0f}"}
        text = phrase(
            "Your bucket {bucket} holds {used} GB of its {quota} GB quota: writes with your "
            "keys are refused (reads and deletes go on) and the platform takes no more "
            "backups into it (the last ones of a lapsed lease excepted) until you delete "
            "objects or snapshots or your provider raises the quota.", **figures
        ) if level == 100 else phrase(
            "Your bucket {bucket} holds {used} GB of its {quota} GB quota.", **figures)
        post_notice(s, Notice(account.tenant_id, kind, text), now)
    account.quota_warned = level


def measure_now(s: Session, p: Records, account: StorageAccount, used: int) -> None:
    """A live measurement (the tenant looked): kept, and the quota's notices checked."""
    measured(s, p, account, used, p.clock.now())
