"""The message catalogs (gpulease/locale/<locale>/LC_MESSAGES/console.po, read with Babel
once per process, no compile step) for whatever speaks to people: the console's pages and
the mail sent to users in their language. English is the source language."""

from __future__ import annotations

from functools import cache
from io import BytesIO
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import NullTranslations, Translations

from gpulease.domain.locales import DEFAULT

DOMAIN = "console"
CATALOGS = Path(__file__).resolve().parent / "locale"


def N_(message: str) -> str:
    """Marks a message for the catalog (`make messages` extracts it); translated where it
    is shown, in the reader's language."""
    return message


@cache
def translations(locale: str, domain: str = DOMAIN) -> NullTranslations:
    """The locale's catalog (a missing one, or English: the messages as written); the
    CLI's `--help` has a catalog of its own (domain `cli_help`, cli/help_text.py)."""
    path = CATALOGS / locale / "LC_MESSAGES" / f"{domain}.po"
    if locale == DEFAULT or not path.exists():
        return NullTranslations()
    with path.open("rb") as f:
        catalog = read_po(f, locale=locale, domain=domain)
    compiled = BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    return Translations(compiled, domain=domain)


def gettext(locale: str | None, message: str) -> str:
    return translations(locale or DEFAULT).gettext(message)


# The default catalog's add-on names (data in gpulease/data/catalog.toml, kept in step by a
# test) marked for the catalogs, so that invoices, quotes and the order form say them in the
# reader's language; an operator's own add-ons are said as the operator wrote them.
DEFAULT_ADDON_NAMES = (
    N_("Public bandwidth (BGP), per Mbps per month"),
    N_("Extra NVMe storage beyond the included disks, per GB per month"),
    N_("Object storage (S3), per GB stored per month, measured daily"),
    N_("Data egress to the Internet, per GB"),
    N_("Help with your own software (drivers, CUDA, NCCL, frameworks), business hours, per month"),
    N_("Help with your own software (drivers, CUDA, NCCL, frameworks), 24×7, per month"),
)
