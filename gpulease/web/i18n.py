"""The console in Chinese and English: gettext catalogs (gpulease/locale/<locale>/
LC_MESSAGES/console.po, read with Babel at start, no compile step), the locale a request is
served in, and numbers, money and dates written the locale's way.

A request's locale: the `lang` cookie the page's switch sets, else the signed-in user's
setting, else the browser's Accept-Language, else English. Templates say `_("…")`; a
missing translation shows the English text."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from io import BytesIO
from pathlib import Path

from babel.dates import format_datetime
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations

from gpulease.domain.locales import DEFAULT, LOCALES, NAMES, choose, known

__all__ = ["LOCALES", "NAMES", "choose", "known"]

COOKIE = "gpulease_lang"
DOMAIN = "console"
CATALOGS = Path(__file__).resolve().parent.parent / "locale"

current: ContextVar[str] = ContextVar("gpulease_locale", default=DEFAULT)


@cache
def translations(locale: str) -> NullTranslations:
    """The locale's catalog, read from its .po file once per process."""
    path = CATALOGS / locale / "LC_MESSAGES" / f"{DOMAIN}.po"
    if locale == DEFAULT or not path.exists():
        return NullTranslations()
    with path.open("rb") as f:
        catalog = read_po(f, locale=locale, domain=DOMAIN)
    compiled = BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    return Translations(compiled, domain=DOMAIN)


def gettext(message: str) -> str:
    """A message in the current request's language (for text built outside templates)."""
    return translations(current.get()).gettext(message)


def money(value: Decimal | float | str | None, locale: str) -> str:
    if value is None:
        return "—"
    return "¥" + format_decimal(Decimal(value), "#,##0.00", locale=locale)


def number(value: float | int | None, locale: str) -> str:
    return "—" if value is None else format_decimal(value, "#,##0", locale=locale)


def moment(value: datetime | None, locale: str, seconds: bool = False) -> str:
    """A date and time of day in UTC, the locale's way ("Dec 2, 2026, 04:10 UTC" /
    "2026年12月2日 04:10 UTC"), to the second for steps seconds apart."""
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    clock = "HH:mm:ss" if seconds else "HH:mm"
    pattern = f"y年M月d日 {clock}" if locale == "zh_CN" else f"MMM d, y, {clock}"
    return format_datetime(value, pattern, tzinfo=UTC, locale=locale) + " UTC"
