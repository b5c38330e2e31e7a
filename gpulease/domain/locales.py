"""The languages gpulease speaks to people (the console, mail) and how one is picked from
what a browser or a user asks for."""

from __future__ import annotations

from collections.abc import Mapping

from babel import Locale, UnknownLocaleError

LOCALES = ("en", "zh_CN")  # English is the source language: it needs no catalog
DEFAULT = "en"
# Language names as each language writes itself, for the switch.
NAMES = {"en": "English", "zh_CN": "简体中文"}


def known(code: str | None) -> str | None:
    """`zh-CN`, `zh_cn`, `zh-Hans-CN` or `zh` → `zh_CN`; `en-US` → `en`; None if neither."""
    if not code:
        return None
    try:
        parsed = Locale.parse(code.strip().replace("-", "_"))
    except (ValueError, UnknownLocaleError):
        return None
    if parsed.language == "zh":
        return "zh_CN" if parsed.territory in (None, "CN", "SG") and parsed.script in (
            None, "Hans") else None
    return "en" if parsed.language == "en" else None


def from_accept_language(header: str | None) -> str | None:
    """The first language the browser prefers that the console speaks (q-values honoured;
    a tag it does not speak is skipped)."""
    if not header:
        return None
    ranked: list[tuple[float, int, str]] = []
    for i, part in enumerate(header.split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                continue
        if q > 0 and tag:
            ranked.append((-q, i, tag))
    for _, _, tag in sorted(ranked):
        if (code := known(tag)) is not None:
            return code
    return None


def choose(cookie: str | None, user_setting: str | None, accept_language: str | None) -> str:
    return (known(cookie) or known(user_setting) or from_accept_language(accept_language)
            or DEFAULT)


# Where a terminal says its language, in the order gettext reads them.
ENVIRONMENT = ("GPULEASE_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def from_environment(env: Mapping[str, str]) -> str | None:
    """The language a terminal asks for: `zh_CN.UTF-8` → `zh_CN`; the first variable set
    decides (LANGUAGE may list several, `zh_CN:en`); `C`, `POSIX` or a language gpulease
    does not speak → None (the server's English)."""
    for name in ENVIRONMENT:
        value = env.get(name, "").strip()
        if not value:
            continue
        for tag in value.split(":"):
            code = tag.split(".", 1)[0].split("@", 1)[0]
            if code in ("C", "POSIX"):
                return None
            if (found := known(code)) is not None:
                return found
        return None
    return None


def http_tag(code: str) -> str:
    """`zh_CN` → `zh-CN`, as Accept-Language writes it."""
    return code.replace("_", "-")
