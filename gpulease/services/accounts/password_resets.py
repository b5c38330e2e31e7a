"""Password reset by e-mail: how a user who has none (a new user) or forgot it reaches the
console.

Asking is open to anyone and answers the same whether or not the address has an account
(nothing to enumerate); the worker mails the link, so the answer takes the same time too.
The link is `<public_url>/console/reset?token=rst_<id>.<mac>`: the id of a row and an
HMAC-SHA256 over it (and its user and expiry) under a key derived from the platform's
secret, so the database holds nothing a reader could turn into a link. A link works once,
for 30 minutes, and setting the password ends the user's console sessions and every other
link. An address may ask GPULEASE_SIGN_IN_ATTEMPTS_PER_ADDRESS times per 15 minutes; an
account gets at most three mails per 15 minutes (no mail bombing).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import smtplib
from datetime import datetime, timedelta

from sqlalchemy import func, select, update

from gpulease.db.tables import PasswordReset, User
from gpulease.domain.errors import Conflict, InvalidInput
from gpulease.domain.phrases import phrase
from gpulease.ports.records import Keeping, Sealed
from gpulease.services.accounts.identity import SIGN_IN_WINDOW_S, blocked, normal_email
from gpulease.services.accounts.users import check_new_password, set_password
from gpulease.services.platform.notify import send_email
from gpulease.translations import N_, gettext

log = logging.getLogger("gpulease.password_resets")
RESET_TTL = timedelta(minutes=30)
PREFIX = "rst_"
MAILS_PER_ACCOUNT = 3  # per sign-in window (15 minutes)
MAX_ATTEMPTS = 5


def _mac(p: Sealed, reset_id: str, user_id: str, expires_at: datetime) -> str:
    doc = f"{reset_id}|{user_id}|{int(expires_at.timestamp())}".encode()
    return hmac.new(p.box.derive("password-reset"), doc, hashlib.sha256).hexdigest()


def reset_link(p: Sealed, row: PasswordReset) -> str:
    token = f"{PREFIX}{row.id}.{_mac(p, row.id, row.user_id, row.expires_at)}"
    return f"{p.settings.public_url.rstrip('/')}/console/reset?token={token}"


def request_reset(p: Keeping, email: str, address: str | None = None) -> None:
    """Queue a reset link for the address's user, if there is one that may sign in."""
    if not p.settings.smtp_host:
        raise Conflict("This platform sends no e-mail (GPULEASE_SMTP_HOST is not set), so "
                       "a password cannot be reset by e-mail here; ask your tenant admin "
                       "to set one for you.")
    now = p.clock.now()
    source = (address or "unknown")[:64]
    key = f"reset:{source}"
    blocked(p, key, p.settings.sign_in_attempts_per_address, now.timestamp(),
            phrase("Too many password reset requests from your address"))
    p.rates.hit(key, SIGN_IN_WINDOW_S, now.timestamp())
    with p.db.write() as s:
        user = s.scalar(select(User).where(User.email == normal_email(email)[:254]))
        if user is None or user.disabled_at is not None or user.removed_at is not None:
            return
        recent = s.scalar(select(func.count()).select_from(PasswordReset).where(
            PasswordReset.user_id == user.id,
            PasswordReset.created_at > now - timedelta(seconds=SIGN_IN_WINDOW_S))) or 0
        if recent >= MAILS_PER_ACCOUNT:
            log.info("password reset for %s not queued: %d in the last 15 minutes",
                     user.id, recent)
            return
        s.add(PasswordReset(id=secrets.token_hex(16), user_id=user.id, created_at=now,
                            expires_at=now + RESET_TTL, requested_from=source, attempts=0))


def _invalid() -> InvalidInput:
    return InvalidInput("token", "This reset link is unknown, used or expired (links last "
                        "30 minutes and work once); ask for a new one.")


def complete_reset(p: Sealed, token: str, password: str) -> str:
    """Set the password the link was sent for; returns the user's e-mail."""
    check_new_password(password)
    reset_id, _, mac = token.removeprefix(PREFIX).partition(".")
    if not token.startswith(PREFIX) or not reset_id or not mac:
        raise _invalid()
    now = p.clock.now()
    with p.db.write() as s:
        row = s.get(PasswordReset, reset_id[:32], with_for_update=True)
        if (row is None or row.used_at is not None or row.expires_at <= now
                or not hmac.compare_digest(mac, _mac(p, row.id, row.user_id, row.expires_at))):
            raise _invalid()
        user = s.get(User, row.user_id)
        if user is None or user.disabled_at is not None or user.removed_at is not None:
            raise _invalid()
        # Every link of this user is spent: the one used, and any other still out there.
        s.execute(update(PasswordReset).where(
            PasswordReset.user_id == row.user_id, PasswordReset.used_at.is_(None))
            .values(used_at=now).execution_options(synchronize_session=False))
        user_id, email = user.id, user.email
    set_password(p, user_id, password)  # ends the user's console sessions
    return email


def deliver_reset_mails(p: Sealed, limit: int = 20) -> int:
    """The worker's job: mail each queued link once (claimed first, so two workers do not
    both send it); a refused mail is tried again up to MAX_ATTEMPTS times."""
    if not p.settings.smtp_host:
        return 0
    now = p.clock.now()
    with p.db.read() as s:
        due = list(s.scalars(select(PasswordReset.id).where(
            PasswordReset.mailed_at.is_(None), PasswordReset.used_at.is_(None),
            PasswordReset.expires_at > now, PasswordReset.attempts < MAX_ATTEMPTS)
            .order_by(PasswordReset.created_at).limit(limit)))
    sent = 0
    for reset_id in due:
        with p.db.write() as s:
            claimed = s.execute(update(PasswordReset).where(
                PasswordReset.id == reset_id, PasswordReset.mailed_at.is_(None))
                .values(mailed_at=now).execution_options(synchronize_session=False))
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                continue
            row = s.get(PasswordReset, reset_id)
            user = s.get(User, row.user_id) if row else None
            if row is None or user is None:
                continue
            link, email, until = reset_link(p, row), user.email, row.expires_at
            locale = user.locale
        try:
            send_email(p, [email], "[gpulease] " + gettext(
                locale, N_("Set your console password")), gettext(locale, N_(
                    "Someone (we hope you) asked to set the password of your gpulease "
                    "console account %(email)s.\n\nSet it here, before %(until)s UTC (the "
                    "link works once):\n\n%(link)s\n\nIf you did not ask, ignore this mail: "
                    "your password stays as it is.\n")) % {
                        "email": email, "until": f"{until:%Y-%m-%d %H:%M}", "link": link})
            sent += 1
        except (OSError, smtplib.SMTPException) as exc:
            with p.db.write() as s:
                failed = s.get(PasswordReset, reset_id)
                if failed is not None:
                    failed.mailed_at = None
                    failed.attempts += 1
                    failed.last_error = f"{exc}"[:1000]
            log.warning("password reset mail %s: %s", reset_id, exc)
    return sent
