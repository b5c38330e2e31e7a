"""The gpulease command line. Talks to a server through GPULEASE_URL / GPULEASE_TOKEN,
except `up`, `serve`, `worker`, `migrate` and `states`, which run the platform itself.
One module per group of commands; this one puts them together."""

from __future__ import annotations

import typer

from gpulease.cli import (
    accounts_cmds,
    agent_backup,
    agent_disk,
    audit_cmds,
    backup_cmds,
    catalog_cmds,
    fabric_cmds,
    fleet_cmds,
    help_text,
    instances_cmds,
    money_cmds,
    platform_cmds,
    saved_image_cmds,
    storage_cmds,
    ticket_cmds,
)
from gpulease.cli.agent import agent_app

app = typer.Typer(help="gpulease: rent out and rent GPU servers.", no_args_is_help=True)
for group in (platform_cmds, catalog_cmds, instances_cmds, fleet_cmds, fabric_cmds,
              accounts_cmds, money_cmds, audit_cmds, ticket_cmds, storage_cmds, backup_cmds):
    app.add_typer(group.app)
app.add_typer(agent_app, name="agent")  # with agent_backup's and agent_disk's commands
assert agent_backup and agent_disk and saved_image_cmds  # they join `agent` and `image`


def main() -> None:
    """The `gpulease` command: the app, its `--help` in the terminal's language."""
    help_text.command(app)()


if __name__ == "__main__":
    main()
