"""The console in Chinese and English: the catalogs (gpulease/translations.py), the locale
a request is served in, and numbers, money and dates written the locale's way.

A request's locale: the `lang` cookie the page's switch sets, else the signed-in user's
setting, else the browser's Accept-Language, else English. Templates say `_("…")`; a
missing translation shows the English text."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import UTC, datetime
from decimal import Decimal

from babel.dates import format_datetime
from babel.numbers import format_decimal

from gpulease.domain.locales import DEFAULT, LOCALES, NAMES, choose, known
from gpulease.translations import translations

__all__ = ["LOCALES", "NAMES", "choose", "known", "translations"]

COOKIE = "gpulease_lang"

current: ContextVar[str] = ContextVar("gpulease_locale", default=DEFAULT)


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
