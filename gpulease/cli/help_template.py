"""`python -m gpulease.cli.help_template`: the cli_help catalog's template (a .pot) from
the command tree, for `make messages` (cli/help_text.py says the help in a language)."""

from __future__ import annotations

import sys

from gpulease.cli.help_text import template
from gpulease.cli.main import app

if __name__ == "__main__":
    sys.stdout.write(template(app))
