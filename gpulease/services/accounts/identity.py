"""Tenants, users and API tokens; turning a bearer token into a Principal."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache

from sqlalchemy import Connection, bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpulease.db.rates import sliding, sliding_wait
from gpulease.db.tables import ApiToken, Tenant, User
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    TooManyRequests,
    Unauthorized,
)
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.text import problem
from gpulease.ports.records import Keeping, Records, Sealed
from gpulease.schemas import (
    MeterCreated,
    Page,
    TenantCreated,
    TenantView,
    TokenCreated,
    TokenView,
    UserView,
)
from gpulease.security import (
    TOKEN_PREFIX,
    hash_password,
    hash_token,
    new_api_token,
    new_id,
    verify_password,
)
from gpulease.services.platform.idempotency import Idem, run_once


def email_of(p: Records, user_id: str) -> str:
    with p.db.read() as s:
        return s.scalar(select(User.email).where(User.id == user_id)) or ""


def user_view(u: User) -> UserView:
    return UserView(id=u.id, tenant_id=u.tenant_id, email=u.email, name=u.name, role=u.role,
                    disabled_at=u.disabled_at, has_password=u.password_hash is not None,
                    locale=u.locale)


def token_view(t: ApiToken) -> TokenView:
    return TokenView(
        id=t.id, name=t.name, prefix=t.prefix, user_id=t.user_id, created_at=t.created_at,
        expires_at=t.expires_at, revoked_at=t.revoked_at,
    )


def token_lifetime(p: Records, days: int | None) -> timedelta | None:
    """How long a new token lives: `days`, at most GPULEASE_TOKEN_MAX_DAYS; None (never
    expires) only where the operator allows it, else the longest allowed."""
    cap = p.settings.token_max_days
    if days is None:
        return None if p.settings.allow_unexpiring_tokens else timedelta(days=cap)
    if days > cap:
        raise InvalidInput("expires_in_days", "A token lives at most {cap} days on this "
                                              "platform (GPULEASE_TOKEN_MAX_DAYS); ask for "
                                              "fewer.", cap=cap)
    return timedelta(days=days)


def _issue(s: Session, p: Records, user: User, name: str, days: int | None,
           lifetime: timedelta | None = None) -> TokenCreated:
    now = p.clock.now()
    raw = new_api_token()
    lifetime = lifetime or token_lifetime(p, days)
    tok = ApiToken(
        id=new_id("tok"), user_id=user.id, name=name, prefix=raw[: len(TOKEN_PREFIX) + 6],
        token_hash=hash_token(raw), created_at=now,
        expires_at=now + lifetime if lifetime else None,
    )
    s.add(tok)
    s.flush()
    return TokenCreated(token=raw, **token_view(tok).model_dump())


def normal_email(email: str) -> str:
    """E-mail addresses are one account whatever their case: stored lower-cased."""
    return email.strip().lower()


@dataclass(frozen=True)
class Person:
    """A user to make: address, name, role, and a console password (None: none yet; a
    reset link gives one)."""

    email: str
    name: str
    role: Role = Role.ADMIN
    password: str | None = None


def create_user(s: Session, p: Records, tenant_id: str | None, who: Person) -> User:
    email, name, role, password = normal_email(who.email), who.name, who.role, who.password
    holder = s.execute(select(User.id, User.tenant_id).where(User.email == email)).first()
    if holder is not None and holder.tenant_id == tenant_id:
        raise Conflict("A user with e-mail {email} exists already; pick another address.",
                       email=email)
    if holder is not None:  # someone else's: say nothing of whose, nor echo the address
        raise Conflict("That e-mail address cannot be used for a new user here; use "
                       "another address.")
    user = User(
        id=new_id("usr"), tenant_id=tenant_id, email=email, name=name, role=role.value,
        password_hash=hash_password(password) if password else None, created_at=p.clock.now(),
    )
    s.add(user)
    s.flush()
    return user


def create_operator(p: Records, email: str, name: str, days: int | None = 90
                    ) -> tuple[User, TokenCreated]:
    """An operator and its first token, expiring in `days` like any token (None: never,
    for the demo's and the tests' own use)."""
    with p.db.write() as s:
        user = create_user(s, p, None, Person(email, name, Role.OPERATOR))
        return user, _issue(s, p, user, "operator", days)


def operator_count(p: Records) -> int:
    with p.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(User)
                            .where(User.role == Role.OPERATOR.value)) or 0)


def create_meter(p: Sealed, actor: Principal, name: str, days: int | None = None,
                 idem: Idem | None = None) -> MeterCreated:
    """Operator: a metering source's account and token. It may only post usage; the
    operator disables or removes it like any user (its tokens end at once)."""
    actor.require_operator()

    def create(s: Session) -> MeterCreated:
        if s.scalar(select(User.id).where(User.email == f"{name.lower()}@meters.invalid")):
            raise Conflict("A meter named {name!r} exists already; pick another name.", name=name)
        user = create_user(s, p, None, Person(f"{name.lower()}@meters.invalid", name,
                                              Role.METER))
        return MeterCreated(meter=user_view(user), token=_issue(s, p, user, "meter", days))

    try:
        return run_once(p, actor, idem, MeterCreated, create)[0]
    except IntegrityError:
        raise Conflict("A meter named {name!r} was made at the same moment; retry.",
                       name=name) from None


def create_tenant(
    p: Sealed, name: str, admin: Person, token_days: int | None = 90,
    *, actor: Principal | None = None, idem: Idem | None = None,
) -> TenantCreated:
    """A tenant with its first admin (`admin`, whatever role it names) and the admin's
    first token, expiring in `token_days`."""
    def create(s: Session) -> TenantCreated:
        if s.scalar(select(Tenant.id).where(Tenant.name == name)):
            raise Conflict("A tenant named {name!r} exists already; pick another name.", name=name)
        tenant = Tenant(id=new_id("ten"), name=name, created_at=p.clock.now())
        s.add(tenant)
        s.flush()
        first = create_user(s, p, tenant.id, replace(admin, role=Role.ADMIN))
        token = _issue(s, p, first, "admin", token_days)
        return TenantCreated(
            tenant=TenantView(id=tenant.id, name=tenant.name, created_at=tenant.created_at),
            admin=user_view(first), token=token,
        )

    try:
        return run_once(p, actor, idem, TenantCreated, create)[0]
    except IntegrityError:
        raise Conflict("That tenant or e-mail was taken at the same moment; retry.") from None


def add_user(p: Sealed, actor: Principal, who: Person, idem: Idem | None = None
             ) -> UserView:
    tenant = actor.require_tenant_admin()
    try:
        return run_once(p, actor, idem, UserView, lambda s: user_view(
            create_user(s, p, tenant, who)))[0]
    except IntegrityError:
        raise Conflict("A user with e-mail {email} was created at the same moment.",
                       email=who.email) from None


def issue_token(
    p: Sealed, actor: Principal, name: str, user_id: str | None, days: int | None,
    idem: Idem | None = None,
) -> TokenCreated:
    return run_once(p, actor, idem, TokenCreated,
                    lambda s: _issue_for(s, p, actor, name, user_id, days))[0]


def _issue_for(
    s: Session, p: Records, actor: Principal, name: str, user_id: str | None, days: int | None
) -> TokenCreated:
    if days is None and not p.settings.allow_unexpiring_tokens:
        raise InvalidInput("expires_in_days", "This platform issues no token that never "
                           "expires; give expires_in_days (at most "
                           "{max_days}).",
                           max_days=p.settings.token_max_days)
    target_id = user_id or actor.user_id
    user = s.get(User, target_id)
    same_tenant = user is not None and user.tenant_id == actor.tenant_id
    if user is None or (target_id != actor.user_id and not (
        actor.is_operator or (actor.role is Role.ADMIN and same_tenant)
    )):
        raise NotFound("No user {target_id} in your tenant; list users to find the id.",
                       target_id=target_id)
    return _issue(s, p, user, name, days)


def list_tokens(p: Records, actor: Principal, limit: int = 100, offset: int = 0
                ) -> Page[TokenView]:
    """The tokens the actor may see (an operator: all; a tenant admin: the tenant's; anyone
    else: their own), oldest first, a page at a time."""
    with p.db.read() as s:
        q = select(ApiToken).join(User, User.id == ApiToken.user_id)
        if actor.role is Role.ADMIN:
            q = q.where(User.tenant_id == actor.tenant_id)
        elif not actor.is_operator:
            q = q.where(ApiToken.user_id == actor.user_id)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(ApiToken.created_at, ApiToken.id).limit(limit)
                         .offset(offset))
        return Page(items=[token_view(t) for t in rows], total=total, limit=limit,
                    offset=offset)


def revoke_token(p: Records, actor: Principal, token_id: str) -> TokenView:
    with p.db.write() as s:
        row = s.execute(
            select(ApiToken, User).join(User, User.id == ApiToken.user_id)
            .where(ApiToken.id == token_id)
        ).first()
        if row is None:
            raise NotFound("No token {token_id}; `gpulease tokens` lists yours.",
                           token_id=token_id)
        tok, owner = row
        allowed = (
            actor.is_operator
            or tok.user_id == actor.user_id
            or (actor.role is Role.ADMIN and owner.tenant_id == actor.tenant_id)
        )
        if not allowed:
            raise NotFound("No token {token_id}; `gpulease tokens` lists yours.",
                           token_id=token_id)
        if tok.revoked_at is None:
            tok.revoked_at = p.clock.now()
        return token_view(tok)


# Columns only (no ORM entities), built once: this runs on every request.
_TOKEN_OWNER = (
    select(ApiToken.revoked_at, ApiToken.expires_at, User.id, User.role, User.tenant_id,
           User.disabled_at, ApiToken.id)
    .join(User, User.id == ApiToken.user_id)
    .where(ApiToken.token_hash == bindparam("token_hash")))


def credential_ended(p: Records, who: Principal) -> str | None:
    """Why the credential a long request (a stream) was authorised with no longer holds:
    the token revoked or expired, its user disabled or removed; None while it holds."""
    if who.token_id is None:
        return None
    with p.db.read() as s:
        row = s.execute(select(ApiToken.revoked_at, ApiToken.expires_at, User.disabled_at,
                               User.removed_at)
                        .join(User, User.id == ApiToken.user_id)
                        .where(ApiToken.id == who.token_id)).first()
    if row is None:
        return "the token is gone"
    revoked_at, expires_at, disabled_at, removed_at = row
    if revoked_at is not None:
        return "the token was revoked"
    if expires_at is not None and expires_at <= p.clock.now():
        return "the token expired"
    if disabled_at is not None or removed_at is not None:
        return "the user was disabled or removed"
    return None


def authenticate(p: Records, raw_token: str | None, conn: Connection | None = None
                 ) -> Principal:
    """The token's owner, or Unauthorized with what to do. `conn`: a connection the caller
    reads on next, so the request checks out one (a hot path's saving on PostgreSQL, whose
    checkout pings the server)."""
    if not raw_token:
        raise Unauthorized(
            "No API token given. Send 'Authorization: Bearer glp_...' or set GPULEASE_TOKEN."
        )
    if not raw_token.startswith(TOKEN_PREFIX):
        raise Unauthorized("That is not a gpulease token (they start with 'glp_').")
    now = p.clock.now()
    with nullcontext(conn) if conn is not None else p.db.connection() as on:
        row = on.execute(_TOKEN_OWNER, {"token_hash": hash_token(raw_token)}).first()
    if row is None:
        raise Unauthorized("Unknown API token; create a new one or check for a typo.")
    revoked_at, expires_at, user_id, role, tenant_id, disabled_at, token_id = row
    if revoked_at is not None:
        raise Unauthorized("This API token was revoked; create a new one.")
    if expires_at is not None and expires_at <= now:
        raise Unauthorized("This API token has expired; create a new one.")
    if disabled_at is not None:
        raise Unauthorized("This user is disabled; ask your tenant admin.")
    return Principal(user_id=user_id, role=Role(role), tenant_id=tenant_id, token_id=token_id)


CONSOLE_SESSION = timedelta(hours=12)
CONSOLE_SESSION_NAME = "console session"  # the token a console sign-in issues


@cache
def _no_user_hash() -> str:
    """Checked when the e-mail is unknown, so both refusals take an argon2 check's time."""
    return hash_password("no such user")


SIGN_IN_WINDOW_S = 15 * 60  # sign-in failures are counted over a sliding 15 minutes


def blocked(p: Keeping, key: str, limit: int, now: float, why: Phrase) -> None:
    """TooManyRequests (with Retry-After) when `key` has `limit` hits in the last 15
    minutes (a sliding window: db/rates.py)."""
    if sliding(p.rates, key, SIGN_IN_WINDOW_S, now) >= limit:
        wait = sliding_wait(p.rates, key, SIGN_IN_WINDOW_S, limit, now)
        raise TooManyRequests(
            "{why}; try again after {value:%H:%M} UTC, or ask "
            "your tenant admin.", retry_after_s=int(wait) + 1,
            why=why, value=datetime.fromtimestamp(now + wait, UTC))


def console_login(p: Keeping, email: str, password: str,
                  address: str | None = None) -> TokenCreated:
    """E-mail and password to a console session: a token that expires in 12 hours, kept
    by the browser in an HttpOnly cookie. The same refusal for every wrong combination, and
    the same limit for a known address and an unknown one (no oracle). Counted over a
    sliding 15 minutes, failures only (colleagues behind one NAT who sign in rightly spend
    nothing): an address may fail GPULEASE_SIGN_IN_ATTEMPTS_PER_ADDRESS times (a password
    spray is slowed); one e-mail address may fail GPULEASE_SIGN_IN_FAILURES_PER_ACCOUNT
    times from one address, so a stranger cannot lock its owner out. The password is
    checked outside any transaction."""
    refused = Unauthorized("Wrong e-mail or password. Ask your tenant admin to set one.")
    now = p.clock.now().timestamp()
    source = address or "unknown"
    spray, wanted = f"signin:{source}", normal_email(email)[:254]
    failures = f"signfail:{hash_token(wanted)[:32]}:{source}"
    blocked(p, spray, p.settings.sign_in_attempts_per_address, now,
            phrase("Too many failed sign-ins from your address"))
    blocked(p, failures, p.settings.sign_in_failures_per_account, now,
            phrase("Too many wrong passwords for this account from your address"))
    user = None
    if problem(wanted) is None:  # a control character is no one's address
        with p.db.read() as s:
            user = s.scalar(select(User).where(User.email == wanted))
    if user is None or user.password_hash is None:
        verify_password(_no_user_hash(), password)
    if (user is None or user.password_hash is None
            or not verify_password(user.password_hash, password)):
        p.rates.hit(spray, SIGN_IN_WINDOW_S, now)
        p.rates.hit(failures, SIGN_IN_WINDOW_S, now)
        raise refused
    with p.db.write() as s:
        row = s.get(User, user.id, with_for_update=True)
        assert row is not None
        if row.disabled_at is None and row.removed_at is None:
            return _issue(s, p, row, CONSOLE_SESSION_NAME, None, CONSOLE_SESSION)
    raise Unauthorized("This user is disabled; ask your tenant admin.")


def console_logout(p: Records, raw_token: str) -> None:
    """End a console session (revokes its token); unknown tokens are ignored."""
    with p.db.write() as s:
        tok = s.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(raw_token)))
        if tok is not None and tok.revoked_at is None:
            tok.revoked_at = p.clock.now()
