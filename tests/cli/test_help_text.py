"""`gpulease --help` in the terminal's language: every help text of the command tree has
its Chinese in the cli_help catalog (whose template is made from the tree, so it must be
current), and the help shows it under `LANG=zh_CN.UTF-8`, English otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from babel.messages.pofile import read_po

from gpulease.cli import help_text
from gpulease.cli.main import app

LOCALE = Path(help_text.__file__).resolve().parents[1] / "locale"
QUIET = {"LANGUAGE": "", "LC_ALL": "", "LC_MESSAGES": "", "GPULEASE_LANG": ""}


def test_every_help_text_is_in_the_template_and_translated() -> None:
    tree = set(help_text.texts(typer.main.get_command(app)))
    with (LOCALE / "cli_help.pot").open("rb") as f:
        template = {m.id for m in read_po(f) if m.id}
    assert tree == template, "run `make messages`: the help changed since the template"
    with (LOCALE / "zh_CN/LC_MESSAGES/cli_help.po").open("rb") as f:
        chinese = {m.id: m.string for m in read_po(f) if m.id}
    missing = sorted(t for t in tree if not chinese.get(t))
    assert not missing, f"translate these in cli_help.po: {missing}"
    assert len(tree) > 300


@pytest.mark.parametrize(("lang", "said", "not_said"), [
    ("zh_CN.UTF-8", ("预付余额、信用额度", "运维：指定租户", "选项", "显示此帮助并退出。"),
     ("The prepaid balance",)),
    ("C.UTF-8", ("The prepaid balance, credit limit", "operator: which tenant", "Options",
                 "Show this message and exit."), ("预付余额",)),
])
def test_help_in_the_terminals_language(lang: str, said: tuple[str, ...],
                                        not_said: tuple[str, ...]) -> None:
    """As a user runs it: the `gpulease` entry point (cli.main:main) in a process."""
    env = os.environ | QUIET | {"LANG": lang, "COLUMNS": "200"}
    shown = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "wallet", "--help"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert all(s in shown.stdout for s in said), shown.stdout
    assert not any(s in shown.stdout for s in not_said), shown.stdout
