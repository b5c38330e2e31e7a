"""Lease reminders and money notices leave the outbox by e-mail (SMTP, to the tenant's
admins) and by a webhook signed with the tenant's secret. Each channel is marked when it
succeeds, so a failed webhook is retried without mailing twice; after MAX_ATTEMPTS a notice
is given up with its last error (visible to the operator)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import smtplib
import time
from email.message import EmailMessage
from typing import Any

import httpx
from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice, TenantWebhook
from gpulease.db.tables import User
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import InvalidInput, NotFound
from gpulease.domain.locales import DEFAULT
from gpulease.domain.phrases import said_stored
from gpulease.ports.records import Records, Sealed
from gpulease.services.platform import egress
from gpulease.translations import N_, gettext, translations

log = logging.getLogger("gpulease.notify")
MAX_ATTEMPTS = 8
SIGNATURE_HEADER = "X-Gpulease-Signature"
SUBJECTS = {"7d": N_("ends in 7 days"), "3d": N_("ends in 3 days"),
            "1d": N_("ends tomorrow"), "expiry": N_("has expired: grace period started"),
            "erased": N_("grace ended: erasing")}
# Money notices (services/money/spending.py) name no lease.
MONEY_SUBJECTS = {"low_balance": N_("Your balance is running low"),
                  "overdrawn": N_("Your account is past its credit limit: top up"),
                  "suspended": N_("Your account is suspended"),
                  "restored": N_("Your account is open again"),
                  "dunning": N_("An invoice is unpaid"),
                  "budget_50": N_("Half of this month's budget is spent"),
                  "budget_80": N_("80 % of this month's budget is spent"),
                  "budget_100": N_("This month's budget is spent")}

# Tickets (services/support/tickets.py): to the tenant, and to operators (OPERATORS).
TICKET_SUBJECTS = {"ticket_opened": N_("A ticket was opened"),
                   "ticket_updated": N_("A ticket was updated"),
                   "ticket_resolved": N_("A ticket was resolved"),
                   "ops_p1": N_("New P1 ticket"),
                   "ops_sla_risk": N_("A ticket's SLA is at risk"),
                   "ops_sla_breach": N_("A ticket's SLA is breached"),
                   "ops_window": N_("A tenant answered a repair window")}
OPERATORS = "@operators"  # the outbox's address for the provider's operators
# Backups and restores of a rented server's data disk (services/storage/backups.py).
DATA_SUBJECTS = {"backup_failed": N_("A backup failed"),
                 "restore_failed": N_("A restore failed"),
                 "copy_failed": N_("A copy to the new server failed"),
                 "backup_saved": N_("Your data was saved before the erase")}
# A delivered instance whose GPUs sat idle most of a day (services/telemetry/idle.py).
IDLE_SUBJECTS = {"instance_idle": N_("An instance's GPUs have been idle for a day")}
# The tenant's bucket against its quota (services/storage/meter.py).
STORAGE_SUBJECTS = {"storage_80": N_("Your object storage is 80 % full"),
                    "storage_full": N_("Your object storage is full")}


def _subject(kind: str, instance_id: str | None, locale: str | None = None
             ) -> tuple[str, str]:
    """(e-mail subject in the reader's language, webhook event) of a notice."""
    def t(message: str) -> str:
        return gettext(locale, message)

    if kind in TICKET_SUBJECTS:
        event = kind.removeprefix("ticket_").removeprefix("ops_")
        return f"[gpulease] {t(TICKET_SUBJECTS[kind])}", f"ticket.{event}"
    if kind in IDLE_SUBJECTS:
        return f"[gpulease] {t(IDLE_SUBJECTS[kind])}: {instance_id}", "instance.idle"
    if kind in STORAGE_SUBJECTS:
        return f"[gpulease] {t(STORAGE_SUBJECTS[kind])}", kind.replace("_", ".")
    if kind in DATA_SUBJECTS:
        return (f"[gpulease] {t(DATA_SUBJECTS[kind])}: {instance_id}",
                kind.replace("_", "."))
    if kind in MONEY_SUBJECTS:
        return f"[gpulease] {t(MONEY_SUBJECTS[kind])}", f"billing.{kind}"
    what = t(SUBJECTS[kind]) if kind in SUBJECTS else kind
    return ("[gpulease] " + t(N_("Lease of %(instance)s %(what)s")) % {
        "instance": instance_id, "what": what}, f"lease.{kind}")


def by_language(recipients: list[tuple[str, str | None]]) -> dict[str | None, list[str]]:
    """Addresses grouped by their user's language (one mail per language)."""
    groups: dict[str | None, list[str]] = {}
    for address, locale in recipients:
        groups.setdefault(locale, []).append(address)
    return groups


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>." + body>`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify_signature(secret: str, header: str, body: bytes, tolerance_s: float = 300,
                     now: float | None = None) -> bool:
    """What a receiver does: recompute, compare in constant time, refuse stale messages."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), header)


# --- a tenant's webhook ---------------------------------------------------------------------

def set_webhook(p: Sealed, actor: Principal, url: str) -> dict[str, str]:
    """Register (or replace) the tenant's webhook; the signing secret is shown once."""
    tenant = actor.require_tenant_admin()
    if not url.startswith(("https://", "http://")) or len(url) > 500:
        raise InvalidInput("url", "A webhook URL starts with https:// (or http://) and has at "
                                  "most 500 characters.")
    url = egress.check(p.settings, url).url  # a public address only (no SSRF)
    secret = "whsec_" + secrets.token_urlsafe(32)
    with p.db.write() as s:
        hook = s.get(TenantWebhook, tenant)
        if hook is None:
            hook = TenantWebhook(tenant_id=tenant)
            s.add(hook)
        hook.url, hook.secret_enc, hook.created_at = url, p.box.seal(secret), p.clock.now()
    return {"url": url, "secret": secret}


def remove_webhook(p: Records, actor: Principal) -> None:
    tenant = actor.require_tenant_admin()
    with p.db.write() as s:
        hook = s.get(TenantWebhook, tenant)
        if hook is None:
            raise NotFound("No webhook is registered for your account.")
        s.delete(hook)


# --- delivery -------------------------------------------------------------------------------

def send_email(p: Records, to: list[str], subject: str, text: str) -> None:
    st = p.settings
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = st.smtp_from, ", ".join(to), subject
    msg.set_content(text)
    with smtplib.SMTP(st.smtp_host, st.smtp_port, timeout=10) as smtp:
        if st.smtp_starttls:
            smtp.starttls()
        if st.smtp_username:
            smtp.login(st.smtp_username, st.smtp_password)
        smtp.send_message(msg)


def _webhook(p: Records, url: str, secret: str, payload: dict[str, Any]) -> None:
    """Checked again now (the name may answer otherwise than at registration) and sent to
    the address just checked; a redirect is an answer, not followed."""
    try:
        target = egress.check(p.settings, url)
    except InvalidInput as exc:
        raise RuntimeError(f"refused: {exc.detail}") from None
    body = json.dumps(payload, sort_keys=True).encode()
    default_port = 443 if target.scheme == "https" else 80
    host = target.host if target.port == default_port else f"{target.host}:{target.port}"
    with httpx.Client(timeout=10, follow_redirects=False) as client:
        resp = client.post(
            target.pinned_url(), content=body,
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            headers={"Host": host, "Content-Type": "application/json",
                     SIGNATURE_HEADER: sign(secret, int(time.time()), body)})
    if resp.status_code >= 300:
        raise RuntimeError(f"webhook answered {resp.status_code}")


def deliver_notices(p: Sealed, limit: int = 50) -> int:
    """Send what the outbox holds; returns how many notices were completed."""
    with p.db.read() as s:
        pending = s.scalars(select(LeaseNotice).where(
            LeaseNotice.sent_at.is_(None), LeaseNotice.attempts < MAX_ATTEMPTS)
            .order_by(LeaseNotice.id).limit(limit)).all()
        jobs = []
        for n in pending:
            admins = [(a, loc) for a, loc in s.execute(select(User.email, User.locale).where(
                User.tenant_id.is_(None), User.role == Role.OPERATOR.value,
                User.disabled_at.is_(None)))] if n.tenant_id == OPERATORS else [
                (a, loc) for a, loc in s.execute(select(User.email, User.locale).where(
                    User.tenant_id == n.tenant_id, User.role == Role.ADMIN.value,
                    User.disabled_at.is_(None)))]
            if n.kind == "ops_sla_breach":  # escalated beyond the operators
                admins += [(a, None) for a in p.settings.escalation_emails]
            if n.tenant_id == OPERATORS:  # the provider's own bridge, from its settings
                st = p.settings
                hook = ((st.operator_webhook_url, st.operator_webhook_secret)
                        if st.operator_webhook_url else None)
            else:
                row = s.get(TenantWebhook, n.tenant_id)
                hook = (row.url, p.box.open(row.secret_enc)) if row else None
            jobs.append((n.id, n.kind, n.instance_id, n.text, n.phrase, n.created_at, admins,
                         n.email_sent_at, n.webhook_sent_at, hook))
    done = 0
    for nid, kind, iid, text, phrased, created, admins, mailed, hooked, hook in jobs:
        errors: list[str] = []
        mail_ok = hook_ok = None
        _, event = _subject(kind, iid)
        if mailed is None and admins and p.settings.smtp_host:
            try:
                for locale, addresses in by_language(admins).items():
                    body = said_stored(text, phrased, translations(locale or DEFAULT).gettext)
                    send_email(p, addresses, _subject(kind, iid, locale)[0], body)
                mail_ok = p.clock.now()
            except (OSError, smtplib.SMTPException) as exc:
                errors.append(f"e-mail: {exc}")
        if hooked is None and hook is not None:
            try:
                _webhook(p, hook[0], hook[1], {"event": event, "instance_id": iid,
                                            "text": text, "notice_id": nid,
                                            "created_at": created.isoformat()})
                hook_ok = p.clock.now()
            except (httpx.HTTPError, RuntimeError) as exc:
                errors.append(f"webhook: {exc}")
        with p.db.write() as s:
            sent = s.get(LeaseNotice, nid)
            assert sent is not None
            sent.email_sent_at = sent.email_sent_at or mail_ok
            sent.webhook_sent_at = sent.webhook_sent_at or hook_ok
            if errors:
                sent.attempts += 1
                sent.last_error = "; ".join(errors)[:1000]
                log.warning("notice %s: %s", nid, sent.last_error)
            else:
                sent.sent_at = p.clock.now()
                done += 1
    return done


def webhook_of(p: Records, actor: Principal) -> str | None:
    """The tenant's webhook URL, if one is registered (its secret is never shown again)."""
    tenant = actor.require_tenant_admin()
    with p.db.read() as s:
        hook = s.get(TenantWebhook, tenant)
        return hook.url if hook is not None else None
