"""`--help` in the terminal's language. Typer builds a Click command tree from the
commands' docstrings and options' help; this walks that tree and says each text from the
`cli_help` catalog (gpulease/locale/<lang>/LC_MESSAGES/cli_help.po), and Typer's own
panel titles from the console's. Its catalog's template comes from the tree itself
(`python -m gpulease.cli.help_template > gpulease/locale/cli_help.pot`, run by `make
messages`), so no help text is written twice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any

import typer
import typer.rich_utils as rich_help
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

from gpulease.cli.words import _, terminal_locale
from gpulease.domain.locales import DEFAULT
from gpulease.translations import N_, translations

HELP_DOMAIN = "cli_help"

# Typer's own words around the help (its module constants, read when help is shown).
PANEL_WORDS = {
    "ARGUMENTS_PANEL_TITLE": N_("Arguments"),
    "COMMANDS_PANEL_TITLE": N_("Commands"),
    "OPTIONS_PANEL_TITLE": N_("Options"),
    "ERRORS_PANEL_TITLE": N_("Error"),
    "ABORTED_TEXT": N_("Aborted."),
    "DEFAULT_STRING": N_("[default: {}]"),
    "ENVVAR_STRING": N_("[env var: {}]"),
    "REQUIRED_LONG_STRING": N_("[required]"),
}
HELP_OPTION = N_("Show this message and exit.")  # what Typer says of --help


# Typer's Click commands (Typer carries a Click of its own): read as they are shaped, a
# command with `help` and `params`, a group with `commands` too.
Command = Any


def _tree(command: Command) -> Iterator[Command]:
    """The command and every command below it, depth first, subcommands by name."""
    yield command
    subcommands = getattr(command, "commands", None) or {}
    for name in sorted(subcommands):
        yield from _tree(subcommands[name])


def texts(command: Command) -> Iterator[str]:
    """Every help text of a command tree: commands' and groups' help, their options' and
    arguments' help, in a stable order."""
    for each in _tree(command):
        if each.help:
            yield each.help
        yield from (param.help for param in each.params if getattr(param, "help", None))


def localize(command: Command, gettext: Callable[[str], str]) -> None:
    """Each help text of the tree in gettext's language (as written where it has none)."""
    for each in _tree(command):
        if each.help:
            each.help = gettext(each.help)
        for param in each.params:
            if getattr(param, "help", None):
                param.help = gettext(param.help)
        each.get_help_option = _said_help_option(each.get_help_option)


def _said_help_option(made: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """--help itself is made when help is asked for: its line in the terminal's language."""
    def help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None and option.help:
            option.help = _(option.help)
        return option
    return help_option


def command(app: typer.Typer) -> Command:
    """The app's Click command, its help in the terminal's language."""
    root = typer.main.get_command(app)
    locale = terminal_locale() or DEFAULT
    if locale != DEFAULT:
        localize(root, translations(locale, HELP_DOMAIN).gettext)
    for name, text in PANEL_WORDS.items():  # English too: one process may ask for both
        setattr(rich_help, name, _(text))
    return root


def template(app: typer.Typer) -> str:
    """The cli_help catalog's template (a .pot): every help text once, written by Babel."""
    catalog = Catalog(domain=HELP_DOMAIN, project="gpulease")
    for text in texts(typer.main.get_command(app)):
        catalog.add(text)
    written = BytesIO()
    write_po(written, catalog, width=100, omit_header=True)
    return written.getvalue().decode()
