"""The CLI's own words (headings, columns, status lines) in the terminal's language: the
one the terminal asks for (GPULEASE_LANG, else LANGUAGE, LC_ALL, LC_MESSAGES, LANG, as
gettext reads them), from the catalogs the console and the mail use. The server's
refusals come in that language too (cli/common.connect), and `--help` (cli/help_text.py)."""

from __future__ import annotations

import os
from typing import Any

from gpulease.domain.fleet.steps import step_words
from gpulease.domain.locales import DEFAULT, from_environment
from gpulease.domain.phrases import Phrase
from gpulease.translations import translations


def terminal_locale() -> str | None:
    """Read at each call: a script may set the language between two commands."""
    return from_environment(os.environ)


def _(message: str, **values: Any) -> str:
    """`message` in the terminal's language, its `{fields}` filled from `values` (the
    English where a translation does not fit them); `make messages` extracts it."""
    gettext = translations(terminal_locale() or DEFAULT).gettext
    return Phrase(message, values).said(gettext)


def step(stage: str | None) -> str:
    """A pipeline stage as people read it, in the terminal's language: "installing the OS,
    4 of 7" for `wait_agent` (the console's words)."""
    return step_words(stage, translations(terminal_locale() or DEFAULT).gettext)
