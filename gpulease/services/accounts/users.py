"""A tenant's users as its admin manages them: list, disable and enable, remove; and a
user's own password. Disabling or removing a user ends their API tokens and console
sessions at once; a password change ends their other console sessions."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpulease.db.tables import ApiToken, User
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.domain.locales import LOCALES, known
from gpulease.domain.phrases import phrase
from gpulease.ports.records import Keeping, Records
from gpulease.schemas import Page, UserView
from gpulease.security import hash_password, verify_password
from gpulease.services.accounts.identity import (
    CONSOLE_SESSION_NAME,
    SIGN_IN_WINDOW_S,
    blocked,
    user_view,
)

MIN_PASSWORD = 12


def list_users(p: Records, actor: Principal, tenant_id: str | None = None,
               limit: int = 100, offset: int = 0) -> Page[UserView]:
    """A tenant admin: the tenant's users; an operator: everyone's (or one tenant's);
    oldest first, a page at a time."""
    q = select(User).where(User.removed_at.is_(None))
    if actor.is_operator:
        if tenant_id:
            q = q.where(User.tenant_id == tenant_id)
    else:
        q = q.where(User.tenant_id == actor.require_tenant_admin())
    with p.db.read() as s:
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(User.created_at, User.id).limit(limit).offset(offset))
        return Page(items=[user_view(u) for u in rows], total=total, limit=limit,
                    offset=offset)


def _target(s: Session, actor: Principal, user_id: str) -> User:
    """The user, locked, if the actor may manage them (another tenant's is not found)."""
    tenant = None if actor.is_operator else actor.require_tenant_admin()
    user = s.get(User, user_id, with_for_update=True)
    if user is None or user.removed_at is not None or (
            tenant is not None and user.tenant_id != tenant):
        raise NotFound("No user {user_id} in your tenant; `gpulease users` lists them.",
                       user_id=user_id)
    if user.id == actor.user_id:
        raise Forbidden("You cannot disable or remove yourself; ask another admin.")
    return user


def _keep_an_admin(s: Session, user: User) -> None:
    if user.role != Role.ADMIN.value or user.tenant_id is None:
        return
    others = s.scalar(select(func.count()).select_from(User).where(
        User.tenant_id == user.tenant_id, User.role == Role.ADMIN.value, User.id != user.id,
        User.disabled_at.is_(None), User.removed_at.is_(None))) or 0
    if others == 0:
        raise Conflict("{user_email} is the tenant's last active admin; make another user "
                       "admin first.", user_email=user.email)


def _end_tokens(s: Session, user_id: str, now: datetime, *, keep: str | None = None,
                sessions_only: bool = False) -> None:
    q = update(ApiToken).where(ApiToken.user_id == user_id, ApiToken.revoked_at.is_(None))
    if keep is not None:
        q = q.where(ApiToken.id != keep)
    if sessions_only:
        q = q.where(ApiToken.name == CONSOLE_SESSION_NAME)
    s.execute(q.values(revoked_at=now).execution_options(synchronize_session=False))


def disable_user(p: Records, actor: Principal, user_id: str) -> UserView:
    now = p.clock.now()
    with p.db.write() as s:
        user = _target(s, actor, user_id)
        if user.disabled_at is None:
            _keep_an_admin(s, user)
            user.disabled_at = now
        _end_tokens(s, user.id, now)
        return user_view(user)


def enable_user(p: Records, actor: Principal, user_id: str) -> UserView:
    with p.db.write() as s:
        user = _target(s, actor, user_id)
        user.disabled_at = None
        return user_view(user)


def remove_user(p: Records, actor: Principal, user_id: str) -> None:
    """The user is gone: disabled, tokens ended, the e-mail free for a new account; the row
    stays (suffixed) for the record."""
    now = p.clock.now()
    with p.db.write() as s:
        user = _target(s, actor, user_id)
        if user.disabled_at is None:
            _keep_an_admin(s, user)
            user.disabled_at = now
        user.removed_at = now
        user.email = f"{user.email}#removed-{user.id}"[:254]
        user.password_hash = None
        _end_tokens(s, user.id, now)


def check_new_password(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise InvalidInput("password", "A console password has at least {min_password} "
                           "characters; a passphrase of a few words is easy to remember.",
                           min_password=MIN_PASSWORD)


def set_password(p: Records, user_id: str, password: str, keep_session: str | None = None
                 ) -> None:
    """Set a user's console password (argon2id at rest) and end their other console
    sessions; callers have proven the right to (the current password, a reset link)."""
    check_new_password(password)
    new_hash = hash_password(password)  # the slow part, outside the transaction
    with p.db.write() as s:
        row = s.get(User, user_id, with_for_update=True)
        if row is None or row.removed_at is not None:
            raise NotFound("No such user.")
        row.password_hash = new_hash
        _end_tokens(s, row.id, p.clock.now(), keep=keep_session, sessions_only=True)


def change_password(p: Keeping, actor: Principal, password: str,
                    current: str | None) -> None:
    """A user sets their own console password. Once one is set, the current one is
    needed, and wrong guesses of it are limited per user like sign-ins (a stolen token
    cannot try passwords without end); the user's other console sessions end."""
    check_new_password(password)
    guesses, now = f"pwguess:{actor.user_id}", p.clock.now().timestamp()
    blocked(p, guesses, p.settings.sign_in_failures_per_account, now,
            phrase("Too many wrong current passwords"))
    with p.db.read() as s:
        user = s.get(User, actor.user_id)
        if user is None:
            raise NotFound("No such user.")
        old_hash = user.password_hash
    if old_hash is not None and not (current and verify_password(old_hash, current)):
        p.rates.hit(guesses, SIGN_IN_WINDOW_S, now)
        raise Forbidden("The current password is wrong or missing; give current_password.")
    set_password(p, actor.user_id, password, keep_session=actor.token_id)


def set_locale(p: Records, actor: Principal, locale: str | None) -> UserView:
    """A user's language for the console and the mail sent to them: `zh_CN` or `en`
    (`zh-CN` and the like accepted); None goes back to the browser's."""
    chosen = known(locale) if locale else None
    if locale and chosen is None:
        raise InvalidInput("locale", "The console speaks {spoken}, not "
                           "{locale!r}; or send null for the browser's language.",
                           list(LOCALES), spoken=', '.join(LOCALES), locale=locale)
    with p.db.write() as s:
        user = s.get(User, actor.user_id)
        if user is None or user.removed_at is not None:
            raise NotFound("No such user.")
        user.locale = chosen
        return user_view(user)


def locale_of(p: Records, user_id: str) -> str | None:
    with p.db.read() as s:
        return s.scalar(select(User.locale).where(User.id == user_id))
