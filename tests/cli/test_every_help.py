"""Every help text renders: Typer shows a command's help as Rich markup, so a `[/PREFIX]`
in one once crashed `gpulease backup --help`. Each text of the command tree and each of
its Chinese translations is parsed as markup; the command that crashed is run in both
languages."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from babel.messages.pofile import read_po
from rich.markup import render
from typer.testing import CliRunner

from gpulease.cli import help_text
from gpulease.cli.main import app

LOCALE = Path(help_text.__file__).resolve().parents[1] / "locale"


def test_every_help_text_and_its_translation_is_markup_that_renders() -> None:
    texts = set(help_text.texts(typer.main.get_command(app)))
    with (LOCALE / "zh_CN/LC_MESSAGES/cli_help.po").open("rb") as f:
        texts |= {m.string for m in read_po(f) if m.id and isinstance(m.string, str)}
    assert len(texts) > 600
    broken = {}
    for text in texts:
        try:
            render(text)
        except Exception as e:  # noqa: BLE001 - what Rich says is the finding
            broken[text[:80]] = str(e)
    assert not broken, broken


@pytest.mark.parametrize("lang", ["C.UTF-8", "zh_CN.UTF-8"])
def test_backup_and_restore_show_their_help(lang: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANG", lang)
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "GPULEASE_LANG"):
        monkeypatch.delenv(var, raising=False)
    for command in ("backup", "restore", "credentials"):
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "120"})
        assert shown.exit_code == 0, (command, shown.output, shown.exception)
        assert "--url" in shown.output


def test_every_command_a_message_names_exists() -> None:
    """A refusal or a notice that says "`gpulease X Y --opt`" names a command of the tree,
    and an option it has (one named `images --mine`, which never existed)."""
    import re

    tree = typer.main.get_command(app)
    texts = set(help_text.texts(tree))
    with (LOCALE / "console.pot").open("rb") as f:
        texts |= {m.id for m in read_po(f) if isinstance(m.id, str) and m.id}
    named = re.compile(r"`gpulease ([^`]*)`")
    unknown = set()
    for text in texts:
        for said in named.findall(" ".join(text.split())):
            command: object = tree
            for word in said.split():
                below = getattr(command, "commands", None)
                if word.startswith("--"):
                    options = {o for param in getattr(command, "params", [])
                               for o in param.opts}
                    if word.split("=")[0] not in options:
                        unknown.add(f"gpulease {said}")
                    continue
                if below is None or not re.fullmatch(r"[a-z][a-z0-9-]*", word):
                    continue  # an argument, a value, or a command's own words
                if word not in below:
                    unknown.add(f"gpulease {said}")
                    break
                command = below[word]
    assert not unknown, sorted(unknown)
